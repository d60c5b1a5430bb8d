// Whether an action on the element can run now (execute.py's element_state), read once in one evaluate, so that
// the executor never lets Playwright wait in vain for a state the page will not reach: an action's Playwright
// call waits (up to the action timeout) for its element to be attached, visible, enabled, editable and not
// covered, and a deadline that ends such a wait is a verdict of the machine's load, not of the page. The checks
// follow Playwright's (its injected script: computeBox, getAriaDisabled, getReadonly, isElementInert,
// retarget, expectHitTarget), read on the same elements:
//   "missing"   no element with that label (the page removed it since the observation);
//   "hidden"    not visible: display none, visibility hidden, or no size (want.visible);
//   "disabled"  disabled natively or by aria-disabled, on the control a label stands for (want.enabled);
//   "inert"     inside an [inert] subtree (want.enabled);
//   "read-only" a readonly input, textarea or select (want.editable);
//   "outside"   no part of it inside the viewport, even scrolled into view (want.pointer);
//   "covered"   another element is hit at the point a click would go to (want.pointer): its first box's
//               centre, after the element is scrolled into view the way Playwright scrolls it;
//   "ok"        none of these.
// For a pointer action the element is scrolled into view first (Element.scrollIntoViewIfNeeded(true), the
// alignment of CDP's DOM.scrollIntoViewIfNeeded that Playwright uses), as the click would scroll it anyway.
(els, want) => {
  const el = els[0];
  if (!el || !el.isConnected) return "missing";
  const parent = (e) => e.parentElement || (e.parentNode && e.parentNode.host) || null;   // through shadow roots
  const textVisible = (node) => {
    const range = node.ownerDocument.createRange();
    range.selectNode(node);
    const r = range.getBoundingClientRect();
    return r.width > 0 && r.height > 0;
  };
  const visible = (e) => {
    const style = getComputedStyle(e);
    if (style.display === "contents")
      return Array.from(e.childNodes).some((c) => c.nodeType === 1 ? visible(c) : c.nodeType === 3 && textVisible(c));
    if (!e.checkVisibility() || style.visibility !== "visible") return false;
    const r = e.getBoundingClientRect();
    return r.width > 0 && r.height > 0;
  };
  const IMPLICIT = {BUTTON: "button", SELECT: "combobox", TEXTAREA: "textbox", OPTION: "option", OPTGROUP: "group",
                    FIELDSET: "group", DETAILS: "group", TR: "row", TH: "columnheader"};
  const INPUTS = {checkbox: "checkbox", radio: "radio", range: "slider", number: "spinbutton", search: "searchbox",
                  button: "button", submit: "button", reset: "button", image: "button"};
  const role = (e) => {
    const explicit = (e.getAttribute("role") || "").trim().split(/\s+/)[0];
    if (explicit) return explicit;
    if (e.tagName === "A") return e.hasAttribute("href") ? "link" : "";
    if (e.tagName === "INPUT") return INPUTS[e.type] || (e.hasAttribute("list") ? "combobox" : "textbox");
    return IMPLICIT[e.tagName] || "";
  };
  const ARIA_DISABLED = new Set(["application", "button", "composite", "gridcell", "group", "input", "link",
    "menuitem", "scrollbar", "separator", "tab", "checkbox", "columnheader", "combobox", "grid", "listbox", "menu",
    "menubar", "menuitemcheckbox", "menuitemradio", "option", "radio", "radiogroup", "row", "rowheader",
    "searchbox", "select", "slider", "spinbutton", "switch", "tablist", "textbox", "toolbar", "tree", "treegrid",
    "treeitem"]);
  const disabled = (e) => {
    if (["BUTTON", "INPUT", "SELECT", "TEXTAREA", "OPTION", "OPTGROUP"].includes(e.tagName)) {
      if (e.hasAttribute("disabled") || (e.tagName === "OPTION" && e.closest("optgroup[disabled]"))) return true;
      const fieldset = e.closest("fieldset[disabled]");
      const legend = fieldset && fieldset.querySelector(":scope > legend");
      if (fieldset && !(legend && legend.contains(e))) return true;
    }
    if (!ARIA_DISABLED.has(role(e))) return false;
    for (let a = e; a; a = parent(a)) {
      const v = (a.getAttribute("aria-disabled") || "").toLowerCase();
      if (v === "true" || v === "false") return v === "true";
    }
    return false;
  };
  if (want.visible && !visible(el)) return "hidden";
  // Playwright reads enabled / editable / inert on the control: the button (or checkbox, radio) an element lies
  // in, or the control of the label it lies in
  const plain = !el.matches("input, textarea, select") && !el.isContentEditable;
  let control = plain ? el.closest("button, [role=button], [role=checkbox], [role=radio]") || el : el;
  if (!control.matches("a, input, textarea, button, select, option, optgroup, [role=link], [role=button], " +
                       "[role=checkbox], [role=radio]") && !control.isContentEditable) {
    const label = control.closest("label");
    if (label && label.control) control = label.control;
  }
  if (want.enabled) {
    if (disabled(control)) return "disabled";
    for (let a = control; a; a = parent(a)) if (a.hasAttribute("inert")) return "inert";
  }
  if (want.editable && ["INPUT", "TEXTAREA", "SELECT"].includes(control.tagName) && control.hasAttribute("readonly"))
    return "read-only";
  if (!want.pointer) return "ok";
  el.scrollIntoViewIfNeeded(true);
  const view = el.ownerDocument.defaultView;
  let point = null;
  for (const r of el.getClientRects()) {      // the first box with some area inside the viewport: its centre
    const x0 = Math.max(r.left, 0), x1 = Math.min(r.right, view.innerWidth);
    const y0 = Math.max(r.top, 0), y1 = Math.min(r.bottom, view.innerHeight);
    if (x1 > x0 && y1 > y0 && (x1 - x0) * (y1 - y0) > 0.99) {
      point = [Math.trunc((x0 + x1) * 50) / 100, Math.trunc((y0 + y1) * 50) / 100];
      break;
    }
  }
  if (!point) return "outside";
  let hit = el.ownerDocument.elementFromPoint(point[0], point[1]);
  while (hit && hit.shadowRoot) {
    const inner = hit.shadowRoot.elementFromPoint(point[0], point[1]);
    if (!inner || inner === hit) break;
    hit = inner;
  }
  // the hit must lie in the element (or in the button or link it lies in), as Playwright's hit-target check asks
  const target = plain ? el.closest("button, [role=button], a, [role=link]") || el : el;
  for (let e = hit; e; e = e.assignedSlot || parent(e)) if (e === target) return "ok";
  return "covered";
}
