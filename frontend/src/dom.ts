/**
 * DOM building without innerHTML: every string, especially the untrusted ones
 * from a logdir (run, layer names, messages), goes in through textContent or
 * setAttribute. This is the only place that creates elements.
 */

export interface ElOptions {
  class?: string;
  text?: string;
  attrs?: Record<string, string | number | boolean | undefined>;
  style?: Partial<CSSStyleDeclaration>;
  on?: Partial<{ [K in keyof HTMLElementEventMap]: (e: HTMLElementEventMap[K]) => void }>;
}

export function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  opts: ElOptions = {},
  children: (Node | string | null | undefined | false)[] = [],
): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  if (opts.class) e.className = opts.class;
  if (opts.text !== undefined) e.textContent = opts.text;
  if (opts.attrs) {
    for (const [k, v] of Object.entries(opts.attrs)) {
      if (v === undefined || v === false) continue;
      e.setAttribute(k, v === true ? "" : String(v));
    }
  }
  if (opts.style) Object.assign(e.style, opts.style);
  if (opts.on) {
    for (const [k, fn] of Object.entries(opts.on)) e.addEventListener(k, fn as EventListener);
  }
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    e.append(typeof c === "string" ? document.createTextNode(c) : c);
  }
  return e;
}

/** Replace all children of `parent`. */
export function setChildren(parent: Element, children: (Node | null | undefined | false)[]): void {
  parent.replaceChildren(...children.filter((c): c is Node => !!c));
}

/** A small coloured square for legends and lists. */
export function swatch(color: string, cls = "nd-swatch"): HTMLSpanElement {
  return el("span", { class: cls, style: { background: color }, attrs: { "aria-hidden": "true" } });
}
