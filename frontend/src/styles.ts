/**
 * The tab's stylesheet (one <style> element; the iframe's CSP allows inline
 * styles) and nothing else. Class names are prefixed "nd-".
 */
export const CSS = `
:root { color-scheme: light; }
/* Reserve the scrollbar: opening the layer detail must not narrow the heatmap (a re-query). */
html { scrollbar-gutter: stable; }
body { margin: 0; }
.nd-root { font: 13px/1.4 Roboto, "Segoe UI", system-ui, -apple-system, sans-serif; color: #1f2937;
  background: #f6f7f9; min-height: 100vh; box-sizing: border-box; }
.nd-root *, .nd-root *::before, .nd-root *::after { box-sizing: border-box; }
.nd-root button { font: inherit; cursor: pointer; }
.nd-root :focus-visible { outline: 2px solid #2563eb; outline-offset: 1px; }
.nd-toolbar { display: flex; align-items: center; gap: 12px; padding: 8px 16px; background: #fff;
  border-bottom: 1px solid #e5e7eb; position: sticky; top: 0; z-index: 5; flex-wrap: wrap; }
.nd-title { font-weight: 600; font-size: 15px; letter-spacing: .2px; margin-right: 8px; }
.nd-title small { font-weight: 400; color: #6b7280; margin-left: 6px; font-size: 12px; }
.nd-field { display: inline-flex; align-items: center; gap: 6px; color: #4b5563; }
.nd-field select { font: inherit; padding: 3px 6px; border: 1px solid #d1d5db; border-radius: 6px; background: #fff; }
.nd-btn { border: 1px solid #d1d5db; background: #fff; color: #1f2937; border-radius: 6px; padding: 3px 9px;
  min-width: 30px; line-height: 20px; }
.nd-btn:hover { background: #f3f4f6; }
.nd-btn:disabled { opacity: .45; cursor: default; }
.nd-btn-primary { background: #b91c1c; border-color: #b91c1c; color: #fff; font-weight: 500; }
.nd-btn-primary:hover { background: #991b1b; }
.nd-btngroup { display: inline-flex; gap: 4px; }
.nd-range { color: #6b7280; font-variant-numeric: tabular-nums; }
.nd-spacer { flex: 1; }
.nd-status-line { color: #6b7280; font-size: 12px; }
.nd-body { display: grid; grid-template-columns: 260px minmax(0, 1fr) 300px; gap: 12px; padding: 12px 16px; align-items: start; }
.nd-card { background: #fff; border: 1px solid #e5e7eb; border-radius: 8px; padding: 10px 12px; }
.nd-card h2 { font-size: 12px; text-transform: uppercase; letter-spacing: .6px; color: #6b7280; margin: 0 0 8px; font-weight: 600; }
.nd-sidebar { display: flex; flex-direction: column; gap: 12px; position: sticky; top: 56px; }
.nd-runlist { list-style: none; margin: 0; padding: 0; display: flex; flex-direction: column; gap: 2px; }
.nd-runitem { display: grid; grid-template-columns: auto minmax(0, 1fr); align-items: center; column-gap: 6px; border-radius: 6px; padding: 2px 4px; }
.nd-runitem.nd-selected { background: #eef2ff; }
.nd-runname { min-width: 0; text-align: left; border: 0; background: none; padding: 3px 2px 0; color: inherit;
  display: flex; align-items: center; gap: 6px; }
.nd-runsum { overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.nd-runname-text { overflow-wrap: anywhere; white-space: normal; }
.nd-runname-text { flex: 1; min-width: 0; }
.nd-runsum { grid-column: 1 / -1; padding: 0 2px 2px; cursor: pointer; }
.nd-runsum { font-size: 11px; line-height: 15px; color: #6b7280; }
.nd-runsum.nd-runsum-failing { color: #b91c1c; }
.nd-runsum.nd-runsum-warning { color: #b45309; }
.nd-dot { width: 8px; height: 8px; border-radius: 50%; flex: none; }
.nd-dot-failing { background: #dc2626; } .nd-dot-healthy { background: #16a34a; }
.nd-legend-ramp { height: 10px; border-radius: 3px; border: 1px solid #e5e7eb; }
.nd-legend-scale { display: flex; justify-content: space-between; color: #6b7280; font-size: 11px; font-variant-numeric: tabular-nums; }
.nd-legend-title { font-size: 12px; margin-bottom: 4px; color: #374151; }
.nd-legend-list { list-style: none; margin: 8px 0 0; padding: 0; display: grid; gap: 3px; font-size: 12px; }
.nd-legend-list li { display: flex; align-items: center; gap: 6px; color: #6b7280; }
.nd-legend-list li.nd-present { color: #111827; font-weight: 500; }
.nd-legend-note { display: flex; align-items: center; gap: 6px; margin-top: 6px; padding-top: 6px; border-top: 1px solid #f3f4f6; color: #6b7280; font-size: 12px; }
.nd-swatch { width: 12px; height: 12px; border-radius: 3px; flex: none; border: 1px solid rgba(0,0,0,.08); }
.nd-main { display: flex; flex-direction: column; gap: 12px; min-width: 0; }
.nd-rootcause { border-left: 4px solid #dc2626; display: flex; gap: 16px; align-items: flex-start; }
.nd-rootcause.nd-healthy { border-left-color: #16a34a; }
.nd-rootcause.nd-warning { border-left-color: #d97706; }
.nd-btn-warning { background: #b45309; border-color: #b45309; color: #fff; font-weight: 500; }
.nd-btn-warning:hover { background: #92400e; }
.nd-rootcause-text { flex: 1; min-width: 0; }
.nd-rootcause-head { font-size: 15px; font-weight: 600; margin-bottom: 2px; }
.nd-rootcause-where { color: #4b5563; margin-bottom: 6px; }
.nd-rootcause-where code, .nd-code { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 12px;
  background: #f3f4f6; padding: 0 4px; border-radius: 4px; }
.nd-rootcause-try, .nd-rootcause-likely, .nd-rootcause-seen { color: #111827; white-space: pre-wrap; overflow-wrap: anywhere; }
.nd-rootcause-likely, .nd-rootcause-seen { color: #374151; margin-top: 2px; }
.nd-rootcause-try b, .nd-rootcause-likely b, .nd-rootcause-seen b { color: #6b7280; font-weight: 600; margin-right: 4px; }
.nd-panels { display: grid; gap: 12px; grid-template-columns: minmax(0, 1fr); }
.nd-panel { padding: 10px 12px 8px; min-width: 0; }
.nd-panel.nd-primary { border-color: #c7d2fe; }
.nd-panel-head { display: flex; align-items: baseline; gap: 8px; margin-bottom: 8px; min-width: 0; }
.nd-panel-run { font-weight: 600; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.nd-badge { font-size: 11px; padding: 1px 7px; border-radius: 10px; font-weight: 500; flex: none; }
.nd-badge-failing { background: #fee2e2; color: #991b1b; } .nd-badge-healthy { background: #dcfce7; color: #166534; }
.nd-panel-sub { color: #6b7280; font-size: 12px; margin-left: auto; flex: none; font-variant-numeric: tabular-nums; }
.nd-plot { display: grid; grid-template-columns: auto minmax(0, 1fr); column-gap: 6px; }
.nd-labels { position: relative; font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 11px; }
.nd-label { position: absolute; right: 0; left: 0; text-align: right; white-space: nowrap; overflow: hidden;
  text-overflow: ellipsis; color: #374151; padding-right: 2px; }
.nd-labels.nd-compact .nd-label:not([data-root-cause]):not(.nd-label-active):not(.nd-label-tick) { visibility: hidden; }
.nd-labels.nd-compact .nd-label-tick { color: #9ca3af; }
.nd-label.nd-label-active { color: #1d4ed8; font-weight: 600; }
.nd-label[data-root-cause] { color: #b91c1c; font-weight: 700; overflow: visible; z-index: 2; }
.nd-label[data-root-cause] .nd-label-text::before { content: "▶ "; font-size: 9px; }
.nd-label[data-root-cause] .nd-label-text { background: #fee2e2; border-radius: 3px; padding: 0 3px; }
.nd-labels.nd-tree .nd-label { text-align: left; padding-right: 4px; }
.nd-label:focus-visible { outline: 2px solid #2563eb; outline-offset: -2px; border-radius: 3px; }
.nd-label[data-kind=group], .nd-label[data-kind=open] { cursor: pointer; }
.nd-label[data-kind=group]:hover .nd-label-text, .nd-label[data-kind=open]:hover .nd-label-text { text-decoration: underline; }
.nd-label-group { color: #1f2937; font-weight: 600; }
.nd-label-band { color: #6b7280; font-weight: 600; }
.nd-label-context { color: #9ca3af; }
.nd-twisty { display: inline-block; width: 12px; color: #6b7280; font-size: 10px; text-align: left; }
.nd-bands { position: absolute; left: 0; top: 0; right: 0; pointer-events: none; }
.nd-band { position: absolute; left: 0; right: 0; top: 0; background: #fff; border-top: 1px solid #e5e7eb; }
.nd-rowbar { display: flex; align-items: center; gap: 10px; flex-wrap: wrap; padding: 6px 12px; }
.nd-filter { font: inherit; width: 210px; max-width: 100%; padding: 3px 8px; border: 1px solid #d1d5db; border-radius: 6px; }
.nd-order .nd-btn[aria-pressed=true] { background: #eef2ff; border-color: #a5b4fc; color: #3730a3; font-weight: 500; }
.nd-rowcount { font-variant-numeric: tabular-nums; }
.nd-canvas-wrap { position: relative; overflow: hidden; cursor: crosshair; user-select: none; background: #f3f4f6; border-radius: 3px; }
.nd-canvas-wrap.nd-dragging { cursor: grabbing; }
.nd-canvas { display: block; position: relative; }
/* Out-of-date image while a re-query runs; the delay keeps fast answers from flickering. */
.nd-panel[data-busy] .nd-canvas-wrap { opacity: .5; transition: opacity .15s .2s; }
.nd-canvas:focus-visible { outline: none; }
.nd-canvas-wrap:focus-within { box-shadow: 0 0 0 2px #93c5fd; }
.nd-ov { position: absolute; left: 0; top: 0; pointer-events: none; will-change: transform; }
.nd-hover { border: 1px solid #111827; box-shadow: 0 0 0 1px #fff; }
.nd-cursor { border: 2px solid #2563eb; box-shadow: 0 0 0 1px #fff; }
.nd-echo { border: 1px dashed #111827; }
.nd-label.nd-label-absent { color: #9ca3af; font-style: italic; }
.nd-echo-col { background: rgba(17, 24, 39, 0.08); border-left: 1px solid rgba(17, 24, 39, 0.35); }
.nd-events-run { font-size: 12px; color: #4b5563; margin: -4px 0 6px; overflow-wrap: anywhere; }
.nd-rootrow { border-top: 1px solid #dc2626; border-bottom: 1px solid #dc2626; background: rgba(220,38,38,.06); }
.nd-onset { border: 2px solid #dc2626; border-radius: 3px; }
.nd-onset-tag { background: #b91c1c; color: #fff; font-size: 11px; padding: 1px 6px; border-radius: 4px; white-space: nowrap; font-weight: 500; }
.nd-pointer { border: 2px solid #f59e0b; box-shadow: 0 0 0 2px rgba(255,255,255,.9), 0 0 10px rgba(245,158,11,.9); border-radius: 3px; }
.nd-tooltip { background: rgba(17,24,39,.94); color: #f9fafb; font-size: 12px; padding: 6px 8px; border-radius: 6px;
  white-space: nowrap; z-index: 4; box-shadow: 0 4px 12px rgba(0,0,0,.2); font-variant-numeric: tabular-nums; }
.nd-tooltip div:first-child { font-weight: 600; }
.nd-axis { position: relative; height: 18px; color: #6b7280; font-size: 11px; font-variant-numeric: tabular-nums; }
.nd-tick { position: absolute; top: 2px; transform: translateX(-50%); white-space: nowrap; }
.nd-tick::before { content: ""; position: absolute; left: 50%; top: -3px; height: 3px; border-left: 1px solid #9ca3af; }
.nd-note { color: #6b7280; padding: 24px 8px; text-align: center; }
.nd-events-col { position: sticky; top: 56px; max-height: calc(100vh - 70px); display: flex; flex-direction: column; }
.nd-eventlist { list-style: none; margin: 0; padding: 0; overflow-y: auto; display: flex; flex-direction: column; gap: 2px; }
.nd-event { width: 100%; text-align: left; border: 1px solid transparent; background: none; border-radius: 6px; padding: 5px 6px;
  display: grid; grid-template-columns: 12px 1fr; column-gap: 6px; color: inherit; }
.nd-event:hover, .nd-event.nd-active { background: #fff7ed; border-color: #fed7aa; }
.nd-event.nd-outside { opacity: .5; }
.nd-event-top { display: flex; gap: 6px; align-items: baseline; min-width: 0; }
.nd-event-step { font-variant-numeric: tabular-nums; color: #6b7280; flex: none; font-size: 12px; }
.nd-event-layer { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 12px; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.nd-event-kind { font-weight: 500; grid-column: 2; font-size: 12px; }
.nd-event-msg { grid-column: 2; color: #6b7280; font-size: 12px; overflow-wrap: anywhere; display: -webkit-box;
  -webkit-line-clamp: 3; -webkit-box-orient: vertical; overflow: hidden; }
.nd-event:hover .nd-event-msg, .nd-event:focus .nd-event-msg, .nd-event.nd-active .nd-event-msg { -webkit-line-clamp: unset; }
.nd-event .nd-swatch { margin-top: 3px; }
.nd-tag-root { font-size: 10px; background: #b91c1c; color: #fff; border-radius: 3px; padding: 0 4px; margin-left: auto; flex: none; }
.nd-detail-head { display: flex; align-items: center; gap: 10px; margin-bottom: 6px; flex-wrap: wrap; }
.nd-detail-title { font-weight: 600; font-family: ui-monospace, SFMono-Regular, Menlo, monospace; overflow-wrap: anywhere; }
.nd-detail-sub { color: #6b7280; }
.nd-chart { width: 100%; height: 180px; display: block; }
.nd-detail-events { list-style: none; padding: 0; margin: 6px 0 0; font-size: 12px; display: grid; gap: 2px; }
.nd-detail-events li { display: flex; gap: 6px; align-items: center; }
.nd-state-screen { padding: 60px 24px; text-align: center; color: #4b5563; }
.nd-state-screen h1 { font-size: 18px; color: #111827; margin: 0 0 8px; }
.nd-state-screen pre { display: inline-block; text-align: left; background: #fff; border: 1px solid #e5e7eb; padding: 10px 14px; border-radius: 8px; }
.nd-banner { background: #fef3c7; border: 1px solid #fcd34d; color: #78350f; border-radius: 8px; padding: 6px 10px; }
.nd-sr { position: absolute; width: 1px; height: 1px; overflow: hidden; clip: rect(0 0 0 0); white-space: nowrap; }
.nd-spinner { display: inline-block; width: 14px; height: 14px; border: 2px solid #c7d2fe; border-top-color: #4f46e5; border-radius: 50%;
  animation: nd-spin .8s linear infinite; vertical-align: -2px; margin-right: 6px; }
@keyframes nd-spin { to { transform: rotate(360deg); } }
@media (max-width: 1100px) { .nd-body { grid-template-columns: 200px minmax(0, 1fr); } .nd-events-col { grid-column: 1 / -1; position: static; max-height: none; } }
`;

/** Class names set from more than one module (toggled ones too): named here once. */
export const CLASS = {
  card: "nd-card",
  btn: "nd-btn",
  note: "nd-note",
  spinner: "nd-spinner",
  statusLine: "nd-status-line",
  spacer: "nd-spacer",
  field: "nd-field",
  selected: "nd-selected",
  primary: "nd-primary",
  active: "nd-active",
  outside: "nd-outside",
  compact: "nd-compact",
  labelActive: "nd-label-active",
  dragging: "nd-dragging",
} as const;
