/**
 * Entry point loaded by TensorBoard: `import("./index.js")` inside the
 * plugin iframe, then `render()`. Everything else is in app.ts.
 */
import { Api } from "./api";
import { App } from "./app";
import { HostChannel } from "./host";

export async function render(): Promise<void> {
  const app = new App(document.body, new Api());
  const host = HostChannel.connect();
  // TensorBoard's reload button and auto-reload: refetch in place.
  host?.listen("experimental.DataReloaded", () => void app.reload());
  host?.listen("experimental.RunsChanged", () => void app.reload());
  await app.reload();
}
