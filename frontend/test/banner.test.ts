import { test } from "node:test";
import assert from "node:assert/strict";
import { adviceParts, causeTitle } from "../src/banner";

const LR =
  "The rate you meant (check the change at that step), a warmup. Likely cause: a learning rate too high for this model. " +
  "Seen: <optimizer>: the updates diverge: the layers' gradients explode.";

test("an <optimizer> cause is titled by what its message is about, not by the layers' symptom", () => {
  assert.equal(causeTitle("exploding_gradient", "<optimizer>", LR), "Learning rate too high");
  assert.equal(causeTitle("exploding_gradient", "<optimizer>", "Call zero_grad() each step. Seen: gradients accumulate"),
    "Gradients not cleared between steps");
  assert.equal(causeTitle("exploding_gradient", "<optimizer>", "Something else."), "Updates too large");
  assert.equal(causeTitle("exploding_gradient", "fc1", LR), "Exploding gradient");
  assert.equal(causeTitle("nonfinite", "sqrt", ""), "Nonfinite");
});

test("the message splits into what to try, the likely cause and what was seen", () => {
  assert.deepEqual(adviceParts(LR), {
    advice: "The rate you meant (check the change at that step), a warmup.",
    likely: "a learning rate too high for this model.",
    seen: "<optimizer>: the updates diverge: the layers' gradients explode.",
  });
  assert.deepEqual(adviceParts("Guard the op. Seen: sqrt: non-finite output."), {
    advice: "Guard the op.", likely: "", seen: "sqrt: non-finite output.",
  });
  assert.deepEqual(adviceParts("Just a sentence."), { advice: "Just a sentence.", likely: "", seen: "" });
});
