/**
 * TensorBoard host messages, guest side (plugin_lib's protocol; plugin_lib is
 * not published to npm). The guest posts "experimental.bootstrap" with a
 * MessagePort to its parent; messages over the port are JSON strings
 * {type, id, payload, error, isReply}. Every message gets a reply.
 */

type Listener = (payload: unknown) => unknown;

interface Message {
  type: string;
  id: number;
  payload: unknown;
  error: string | null;
  isReply: boolean;
}

export class HostChannel {
  private readonly listeners = new Map<string, Listener>();
  private readonly waits = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  private nextId = 0;

  constructor(private readonly port: MessagePort) {
    port.addEventListener("message", (e) => void this.onMessage(e.data));
    port.start();
  }

  /** Connect to the parent frame; null when not inside an iframe. */
  static connect(win: Window = window): HostChannel | null {
    if (!win.parent || win.parent === win) return null;
    const channel = new MessageChannel();
    const host = new HostChannel(channel.port1);
    win.parent.postMessage("experimental.bootstrap", "*", [channel.port2]);
    return host;
  }

  listen(type: string, fn: Listener): void {
    this.listeners.set(type, fn);
  }

  send(type: string, payload?: unknown): Promise<unknown> {
    const id = this.nextId++;
    this.post({ type, id, payload: payload ?? null, error: null, isReply: false });
    return new Promise((resolve, reject) => this.waits.set(id, { resolve, reject }));
  }

  private post(m: Message): void {
    this.port.postMessage(JSON.stringify(m));
  }

  private async onMessage(data: unknown): Promise<void> {
    let m: Message;
    try {
      m = JSON.parse(String(data)) as Message;
    } catch {
      return;
    }
    if (m.isReply) {
      const w = this.waits.get(m.id);
      this.waits.delete(m.id);
      if (w) (m.error ? w.reject(new Error(m.error)) : w.resolve(m.payload));
      return;
    }
    let payload: unknown = null;
    let error: string | null = null;
    const fn = this.listeners.get(m.type);
    try {
      if (fn) payload = (await fn(m.payload)) ?? null;
    } catch (e) {
      error = String(e);
    }
    this.post({ type: m.type, id: m.id, payload, error, isReply: true });
  }
}
