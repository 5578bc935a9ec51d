/**
 * The root-cause banner's words (pure, unit tested in test/banner.test.ts):
 * a title that names what the message is about, and the message cut into
 * what to try, the likely cause and what was seen.
 *
 * A cause outside the layers keeps the kind of the failure it explains (an
 * `<optimizer>` cause of kind exploding_gradient): its title says where the
 * fix goes (the learning rate, the loop), as its message does.
 */
import { humanize } from "./format";

/** Titles of causes at `<optimizer>`, by kind, then by what the message is about. */
const OPTIMIZER_TITLES: [RegExp, string][] = [
  [/zero_grad|not cleared|accumulat/i, "Gradients not cleared between steps"],
  [/learning rate|\brate\b/i, "Learning rate too high"],
];

/** The banner's title for a root cause of `kind` at `layer` with `message`. */
export function causeTitle(kind: string, layer: string, message: string): string {
  if (layer === "<optimizer>" && (kind === "exploding_gradient" || kind === "loss_spike")) {
    for (const [re, title] of OPTIMIZER_TITLES) if (re.test(message)) return title;
    return "Updates too large";
  }
  if (layer === "<optimizer>" && kind === "vanishing_gradient") return "Updates too small";
  return humanize(kind);
}

export interface AdviceParts {
  /** What to try (the message's first part); the whole message when it has no parts. */
  advice: string;
  likely: string;
  seen: string;
}

/** A root cause's message ("ADVICE Likely cause: ... Seen: ...", explain.advice_first) in parts. */
export function adviceParts(message: string): AdviceParts {
  const text = message.trim();
  const li = text.indexOf("Likely cause: ");
  const si = text.indexOf("Seen: ", li < 0 ? 0 : li);
  const cuts = [li, si].filter((i) => i > 0);
  const adviceEnd = cuts.length ? Math.min(...cuts) : text.length;
  return {
    advice: text.slice(0, adviceEnd).trim(),
    likely: li > 0 ? text.slice(li + "Likely cause: ".length, si > li ? si : text.length).trim() : "",
    seen: si > 0 ? text.slice(si + "Seen: ".length).trim() : "",
  };
}
