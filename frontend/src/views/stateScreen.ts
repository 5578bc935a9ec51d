/** The whole-tab screens shown instead of the heatmaps: no data yet, or the first load failed. */
import { el, setChildren } from "../dom";
import { CLASS } from "../styles";

const RECORD_EXAMPLE = `from tb_neuraldbg import DebugWriter

writer = DebugWriter("runs/exp1")
writer.watch(model, optimizer=opt, criterion=loss_fn)
# ... train as usual ...
writer.close()`;

export class StateScreen {
  readonly element = el("div", { class: "nd-state-screen" });

  constructor(private readonly onRetry: () => void) {}

  /** No run of the logdir has NeuralDbg data: how to record some. */
  showEmpty(): void {
    setChildren(this.element, [
      el("h1", { text: "No NeuralDbg data yet" }),
      el("p", { text: "None of the runs in this logdir has NeuralDbg data. Record some with:" }),
      el("pre", { text: RECORD_EXAMPLE }),
      el("p", { text: "Runs appear here on TensorBoard's next reload." }),
    ]);
    this.element.style.display = "";
  }

  /** The first load failed: the server's answer (as text) and a retry button. */
  showError(message: string): void {
    setChildren(this.element, [
      el("h1", { text: "Could not load NeuralDbg data" }),
      el("p", { text: message }),
      el("button", { class: CLASS.btn, text: "Retry", attrs: { type: "button" }, on: { click: () => this.onRetry() } }),
    ]);
    this.element.style.display = "";
  }

  hide(): void {
    this.element.style.display = "none";
  }
}
