// The gradients of a list of parameters, read in one call, and a module's
// input and output handed to the fused kernel in one call (grad_reader.py).
//
// In Python, reading the norms' inputs of a 1,000-module model's 1,502
// gradients costs more than the norms themselves: ``p.grad`` makes a Python
// object for each fresh gradient, then seven passes (type, layout, dtype,
// device, contiguity, size, address) cost 100-400 us each. Here the same
// facts come from the C++ tensors directly: about 0.3 ms for all of them.
//
// read(params, ptrs, lens, status) -> (other, holder)
//   params: a list of tensors (the watched parameters); ptrs, lens, status:
//   addresses of uint64, int64 and int8 arrays of len(params) values.
//   status[i]: 0 the gradient is a dense float32 CPU tensor (plain_float32:
//   contiguous or channels_last; its data's address in ptrs[i], its size in
//   lens[i]); 3 the same of bfloat16 values, 4 of float16 ones (a model
//   trained in them); 1 no gradient; 2 any other
//   (another dtype or device, a layout, a tensor subclass, a gradient that
//   requires grad): the caller reads that step in Python.
//   other: how many have status 2. holder: keeps the gradients alive (a
//   reference to each) until it is dropped, so that the addresses stay
//   valid while they are read even if another thread drops a gradient.
//
// read_data(tensors, ptrs, lens, status) -> (other, holder): the same of
//   the tensors' own values (the weights' norms); a tensor that requires
//   grad is read too.
//
// marks(params, ids, versions) -> None
//   ids, versions: addresses of uint64 and int64 arrays of len(params)
//   values: each gradient's identity (its TensorImpl's address; 0: no
//   gradient) and version counter (-1: none, an inference tensor), which
//   tell a gradient left over from the last step (optimizer_facts.py).
//
// all_require_grad(params) -> bool: whether every one requires grad (a
//   parameter frozen since the last step is looked for at every step).
//
// set_moments(address, address_bf16, address_f16, max_elements) -> None:
//   the fused kernel's nd_moments_f32, nd_moments_bf16 and nd_moments_f16
//   (moments.c, loaded by cpu_kernel.py), which measure calls.
//
// measure(x, x_batched, y, y_dead, exact, bounds) -> tuple of floats, or None
//   A module's first input ``x`` (or None) and output ``y`` in one call, for
//   a full step's forward hook (instrument.py): in Python, the checks, two
//   ctypes calls and their buffers cost more than the kernel's read of a
//   small activation. The values, in the order of instrument._FAST_KEYS:
//   x's size, [its units a sample], sum, non-zeros, [dead units], [non-
//   finite]; then y's size, [units], min, max, sum, L2 norm, non-zeros,
//   [dead units], [non-finite], [saturated values] (the bracketed ones when
//   x_batched, y_dead, exact, bounds: a batched tensor is [size(0), units];
//   bounds, None or a bounded activation's (mid, half, sign) as
//   cpu_kernel.saturation_bounds gives them). None when the kernel does
//   not take one of them (not a torch.Tensor or Parameter of dense float32,
//   bfloat16 or float16 CPU values, plain_float32; a subclass, empty, too
//   large, an output of one value; batched, a batch that is not the
//   outermost dimension in memory) or is not set: the caller measures it
//   as before.
//   Holds the GIL while it reads a small activation (microseconds: letting
//   it go would let the worker thread in, whom the training thread would
//   then wait for); lets it go for a large one (kReleaseGil).
//
// Never raises a C++ exception into Python: any error of PyTorch's becomes
// a RuntimeError, and the caller reads in Python.

#include <Python.h>

#include <ATen/core/Tensor.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cstdint>
#include <vector>

namespace {

const char kHolder[] = "tb_neuraldbg.grads";

void free_holder(PyObject* capsule) {
  delete static_cast<std::vector<at::Tensor>*>(PyCapsule_GetPointer(capsule, kHolder));
}

// Inside a catch block: the C++ exception being handled as a Python
// RuntimeError (its message, else ``otherwise``); returns nullptr.
PyObject* raise_current(const char* otherwise) {
  try {
    throw;
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  } catch (...) {
    PyErr_SetString(PyExc_RuntimeError, otherwise);
  }
  return nullptr;
}

// Whether the kernel reads ``t`` as it is: float32 values in CPU memory of
// its own (not a subclass, a nested or a storage-less one, nor a negative
// view, whose memory holds the values' opposites) that fill numel() places
// from the data pointer, in any order: contiguous, channels_last (a CNN's
// activations, weights and gradients in that memory format), a transposed
// matrix. The statistics the kernel takes do not depend on the order (dead
// units: see tensor_moments). or_half: bfloat16 and float16 values too.
bool plain_float32(const at::Tensor& t, bool or_half = false) {
  const auto type = t.scalar_type();
  return t.layout() == c10::kStrided &&
         (type == c10::kFloat || (or_half && (type == c10::kBFloat16 || type == c10::kHalf))) &&
         t.device().is_cpu() && !t.is_nested() && !t.unsafeGetTensorImpl()->is_python_dispatch() && t.has_storage() &&
         t.is_non_overlapping_and_dense() && !t.is_neg();
}

// read() and read_data(): of_grad, the tensors' gradients, else the tensors.
PyObject* read_any(PyObject* args, bool of_grad) {
  PyObject* params;
  unsigned long long ptrs_at, lens_at, status_at;
  if (!PyArg_ParseTuple(args, "O!KKK", &PyList_Type, &params, &ptrs_at, &lens_at, &status_at)) {
    return nullptr;
  }
  auto* ptrs = reinterpret_cast<uint64_t*>(ptrs_at);
  auto* lens = reinterpret_cast<int64_t*>(lens_at);
  auto* status = reinterpret_cast<int8_t*>(status_at);
  const Py_ssize_t n = PyList_GET_SIZE(params);
  auto* held = new std::vector<at::Tensor>();
  long other = 0;
  try {
    held->reserve(static_cast<size_t>(n));
    for (Py_ssize_t i = 0; i < n; i++) {
      ptrs[i] = 0;
      lens[i] = 0;
      PyObject* obj = PyList_GET_ITEM(params, i);
      // A tensor read for its own values is a Tensor or a Parameter, not a
      // subclass (which may mean something else by its data); a parameter
      // of any class may have a plain gradient.
      if (of_grad ? !THPVariable_Check(obj) : !THPVariable_CheckExact(obj)) {
        status[i] = 2;
        other++;
        continue;
      }
      const at::Tensor& t = THPVariable_Unpack(obj);
      const at::Tensor& g = of_grad ? t.grad() : t;
      if (!g.defined()) {
        status[i] = 1;
        continue;
      }
      if (!plain_float32(g, true) || (of_grad && g.requires_grad())) {
        status[i] = 2;
        other++;
        continue;
      }
      held->push_back(g);
      ptrs[i] = reinterpret_cast<uint64_t>(g.const_data_ptr());
      lens[i] = g.numel();
      status[i] = g.scalar_type() == c10::kBFloat16 ? 3 : g.scalar_type() == c10::kHalf ? 4 : 0;
    }
  } catch (...) {
    delete held;
    return raise_current("reading the gradients failed");
  }
  PyObject* holder = PyCapsule_New(held, kHolder, free_holder);
  if (holder == nullptr) {
    delete held;
    return nullptr;
  }
  return Py_BuildValue("(lN)", other, holder);
}

PyObject* read(PyObject*, PyObject* args) { return read_any(args, true); }

PyObject* read_data(PyObject*, PyObject* args) { return read_any(args, false); }

PyObject* marks(PyObject*, PyObject* args) {
  PyObject* params;
  unsigned long long ids_at, versions_at;
  if (!PyArg_ParseTuple(args, "O!KK", &PyList_Type, &params, &ids_at, &versions_at)) {
    return nullptr;
  }
  auto* ids = reinterpret_cast<uint64_t*>(ids_at);
  auto* versions = reinterpret_cast<int64_t*>(versions_at);
  const Py_ssize_t n = PyList_GET_SIZE(params);
  try {
    for (Py_ssize_t i = 0; i < n; i++) {
      ids[i] = 0;
      versions[i] = -1;
      PyObject* obj = PyList_GET_ITEM(params, i);
      if (!THPVariable_Check(obj)) {
        PyErr_SetString(PyExc_TypeError, "not a tensor");
        return nullptr;
      }
      const at::Tensor& g = THPVariable_Unpack(obj).grad();
      if (!g.defined()) {
        continue;
      }
      ids[i] = reinterpret_cast<uint64_t>(g.unsafeGetTensorImpl());
      if (!g.is_inference()) {
        versions[i] = static_cast<int64_t>(g._version());
      }
    }
  } catch (...) {
    return raise_current("reading the gradients failed");
  }
  Py_RETURN_NONE;
}

PyObject* all_require_grad(PyObject*, PyObject* args) {
  PyObject* params;
  if (!PyArg_ParseTuple(args, "O!", &PyList_Type, &params)) {
    return nullptr;
  }
  const Py_ssize_t n = PyList_GET_SIZE(params);
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject* obj = PyList_GET_ITEM(params, i);
    if (!THPVariable_Check(obj)) {
      PyErr_SetString(PyExc_TypeError, "not a tensor");
      return nullptr;
    }
    if (!THPVariable_Unpack(obj).requires_grad()) {
      Py_RETURN_FALSE;
    }
  }
  Py_RETURN_TRUE;
}

// nd_moments_f32, nd_moments_bf16 and nd_moments_f16 of moments.c:
// (values, n, units, alive scratch, bounds or nullptr, out[8]).
using MomentsFn = int (*)(const void*, int64_t, int64_t, int32_t*, const float*, double*);
MomentsFn moments_fn = nullptr;
MomentsFn moments_bf16_fn = nullptr;
MomentsFn moments_f16_fn = nullptr;
int64_t max_elements = 0;

PyObject* set_moments(PyObject*, PyObject* args) {
  unsigned long long address, address_bf16, address_f16;
  long long most;
  if (!PyArg_ParseTuple(args, "KKKL", &address, &address_bf16, &address_f16, &most)) {
    return nullptr;
  }
  moments_fn = reinterpret_cast<MomentsFn>(address);
  moments_bf16_fn = reinterpret_cast<MomentsFn>(address_bf16);
  moments_f16_fn = reinterpret_cast<MomentsFn>(address_f16);
  max_elements = most;
  Py_RETURN_NONE;
}

// From this many values (1 MB, some 50-100 us of reading) the GIL is let go
// during the read, as ctypes does: other Python threads (the worker, a data
// loader's) are not held up by a large activation.
constexpr int64_t kReleaseGil = int64_t{1} << 18;

// The kernel's moments of one tensor into out[8] (its saturated values
// where bounds is not nullptr), its units a sample into *units (0 unless
// batched); false when the kernel does not take it.
bool tensor_moments(PyObject* obj, bool batched, int64_t least, const float* bounds, double* out,
                    int64_t* units) {
  if (!THPVariable_CheckExact(obj)) {
    return false;
  }
  const at::Tensor& t = THPVariable_Unpack(obj);
  if (!plain_float32(t, /*or_half=*/true)) {
    return false;
  }
  const auto type = t.scalar_type();
  const MomentsFn fn = type == c10::kFloat ? moments_fn : type == c10::kBFloat16 ? moments_bf16_fn : moments_f16_fn;
  const int64_t n = t.numel();
  if (n < least || n > max_elements) {
    return false;
  }
  *units = 0;
  if (batched) {
    // Each sample's values in a block of their own, laid out as every other
    // sample's (the batch the outermost dimension in memory): the kernel's
    // units are then the sample's elements in one order for all samples, so
    // the dead ones are as many.
    if (t.dim() < 2 || (t.size(0) > 1 && t.stride(0) * t.size(0) != n)) {
      return false;
    }
    *units = n / t.size(0);
  }
  thread_local std::vector<int32_t> alive;
  if (static_cast<size_t>(*units) > alive.size()) {
    alive.resize(static_cast<size_t>(*units));
  }
  const void* values = t.const_data_ptr();
  int32_t* scratch = *units ? alive.data() : nullptr;
  int rc;
  if (n >= kReleaseGil) {
    Py_BEGIN_ALLOW_THREADS rc = fn(values, n, *units, scratch, bounds, out);
    Py_END_ALLOW_THREADS
  } else {
    rc = fn(values, n, *units, scratch, bounds, out);
  }
  return rc == 0;
}

PyObject* measure(PyObject*, PyObject* args) {
  PyObject *x, *y, *bounds_obj;
  int x_batched, y_dead, exact;
  if (!PyArg_ParseTuple(args, "OpOppO", &x, &x_batched, &y, &y_dead, &exact, &bounds_obj)) {
    return nullptr;
  }
  if (moments_fn == nullptr || moments_bf16_fn == nullptr || moments_f16_fn == nullptr) {
    Py_RETURN_NONE;
  }
  float bounds[3];
  const bool saturation = bounds_obj != Py_None;
  if (saturation && !PyArg_ParseTuple(bounds_obj, "fff", &bounds[0], &bounds[1], &bounds[2])) {
    return nullptr;
  }
  double xm[8], ym[8];
  int64_t xu = 0, yu = 0;
  double vals[20];
  int k = 0;
  try {
    const bool has_x = x != Py_None;
    if (has_x && !tensor_moments(x, x_batched, 1, nullptr, xm, &xu)) {
      Py_RETURN_NONE;
    }
    // (an output of one value has no spread: instrument.py measures it alone)
    if (!tensor_moments(y, y_dead, 2, saturation ? bounds : nullptr, ym, &yu)) {
      Py_RETURN_NONE;
    }
    if (has_x) {
      vals[k++] = static_cast<double>(THPVariable_Unpack(x).numel());
      if (x_batched) vals[k++] = static_cast<double>(xu);
      vals[k++] = xm[2];
      vals[k++] = xm[4];
      if (x_batched) vals[k++] = xm[6];
      if (exact) vals[k++] = xm[5];
    }
    vals[k++] = static_cast<double>(THPVariable_Unpack(y).numel());
    if (y_dead) vals[k++] = static_cast<double>(yu);
    for (int j = 0; j < 5; j++) vals[k++] = ym[j];
    if (y_dead) vals[k++] = ym[6];
    if (exact) vals[k++] = ym[5];
    if (saturation) vals[k++] = ym[7];
  } catch (...) {
    return raise_current("measuring the activations failed");
  }
  PyObject* out = PyTuple_New(k);
  if (out == nullptr) {
    return nullptr;
  }
  for (int j = 0; j < k; j++) {
    PyObject* v = PyFloat_FromDouble(vals[j]);
    if (v == nullptr) {
      Py_DECREF(out);
      return nullptr;
    }
    PyTuple_SET_ITEM(out, j, v);
  }
  return out;
}

PyMethodDef kMethods[] = {
    {"set_moments", set_moments, METH_VARARGS, "The fused kernel's moments function (see grads.cpp)."},
    {"measure", measure, METH_VARARGS, "A module's input and output moments in one call (see grads.cpp)."},
    {"all_require_grad", all_require_grad, METH_VARARGS, "Whether every tensor of the list requires grad."},
    {"read", read, METH_VARARGS, "The gradients' addresses, sizes and status (see grads.cpp)."},
    {"read_data", read_data, METH_VARARGS, "The tensors' own addresses, sizes and status (see grads.cpp)."},
    {"marks", marks, METH_VARARGS, "Each gradient's identity and version counter (see grads.cpp)."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "_nd_grads", "tb_neuraldbg's gradient reader", -1, kMethods};

}  // namespace

PyMODINIT_FUNC PyInit__nd_grads() { return PyModule_Create(&kModule); }
