// The gradients of a list of parameters, read in one call (grad_reader.py).
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
//   status[i]: 0 the gradient is a contiguous float32 CPU tensor (its data's
//   address in ptrs[i], its size in lens[i]); 1 no gradient; 2 any other
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

// Whether the kernel reads ``t`` as it is: contiguous float32 values in
// CPU memory of its own (not a subclass, a nested or a storage-less one).
bool plain_float32(const at::Tensor& t) {
  return t.layout() == c10::kStrided && t.scalar_type() == c10::kFloat && t.device().is_cpu() && !t.is_nested() &&
         !t.unsafeGetTensorImpl()->is_python_dispatch() && t.has_storage() && t.is_contiguous();
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
      if (!plain_float32(g) || (of_grad && g.requires_grad())) {
        status[i] = 2;
        other++;
        continue;
      }
      held->push_back(g);
      ptrs[i] = reinterpret_cast<uint64_t>(g.const_data_ptr());
      lens[i] = g.numel();
      status[i] = 0;
    }
  } catch (const std::exception& e) {
    delete held;
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  } catch (...) {
    delete held;
    PyErr_SetString(PyExc_RuntimeError, "reading the gradients failed");
    return nullptr;
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
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  } catch (...) {
    PyErr_SetString(PyExc_RuntimeError, "reading the gradients failed");
    return nullptr;
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

PyMethodDef kMethods[] = {
    {"all_require_grad", all_require_grad, METH_VARARGS, "Whether every tensor of the list requires grad."},
    {"read", read, METH_VARARGS, "The gradients' addresses, sizes and status (see grads.cpp)."},
    {"read_data", read_data, METH_VARARGS, "The tensors' own addresses, sizes and status (see grads.cpp)."},
    {"marks", marks, METH_VARARGS, "Each gradient's identity and version counter (see grads.cpp)."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "_nd_grads", "tb_neuraldbg's gradient reader", -1, kMethods};

}  // namespace

PyMODINIT_FUNC PyInit__nd_grads() { return PyModule_Create(&kModule); }
