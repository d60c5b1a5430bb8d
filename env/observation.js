(opts) => {
  // opts: {keep: KEPT_ATTRS, exclude: ids of top-level-document elements left out with their subtrees}
  const t0 = performance.now();
  const KEEP = opts.keep;
  const ROLES = new Set(['button', 'link', 'checkbox', 'radio', 'tab', 'menuitem', 'menuitemcheckbox',
    'menuitemradio', 'option', 'textbox', 'combobox', 'switch', 'treeitem', 'searchbox', 'slider',
    'spinbutton', 'listbox', 'gridcell']);
  const SKIP = new Set(['SCRIPT', 'STYLE', 'NOSCRIPT', 'TEMPLATE', 'HEAD', 'META', 'LINK', 'TITLE', 'BASE',
    'PARAM', 'SOURCE', 'TRACK', 'DATALIST', 'DEFS', 'CLIPPATH', 'MASK', 'LINEARGRADIENT', 'RADIALGRADIENT']);
  const SEMANTIC = new Set(['H1', 'H2', 'H3', 'H4', 'H5', 'H6', 'P', 'LI', 'TABLE', 'TR', 'TD', 'TH', 'LABEL',
    'IMG', 'DIALOG', 'TEXTAREA', 'SELECT', 'BUTTON', 'A', 'INPUT', 'PRE', 'CODE', 'BLOCKQUOTE', 'TEXT']);
  const VOID = new Set(['INPUT', 'IMG', 'BR', 'HR', 'AREA', 'EMBED', 'WBR']);
  const NOVALUE = new Set(['checkbox', 'radio', 'file', 'image', 'hidden', 'color', 'range']);
  const exclude = new Set(opts.exclude || []);
  const vw = window.innerWidth, vh = window.innerHeight;
  let frameSeq = 0;
  let moreAbove = window.scrollY > 2, moreBelow = false;

  const clean = (s) => s.replace(/\s+/g, ' ').trim();
  const SEP = {sep: true};
  const WORD = /[\p{L}\p{N}]/u;
  const clearStamps = (root) => {
    root.querySelectorAll('[data-webagent-id]').forEach((e) => e.removeAttribute('data-webagent-id'));
    root.querySelectorAll('[data-webagent-frame]').forEach((e) => e.removeAttribute('data-webagent-frame'));
  };

  // does the page attach a click-like handler directly to this element? (jQuery, d3 v3/v4, onclick)
  const hasHandler = (el, win) => {
    if (el.onclick || el.onmousedown || el.onmouseup || el.hasAttribute('onclick')) return true;
    if (el.__onclick || el.__onmousedown || el.__onmouseup) return true;            // d3 v3
    if (el.__on) { for (const h of el.__on) { if (/^(click|mousedown|mouseup|dblclick)$/.test(h.type)) return true; } }  // d3 v4
    const jq = win.jQuery;
    if (jq && jq._data) {
      const ev = jq._data(el, 'events');
      if (ev) {
        for (const t of ['click', 'mousedown', 'mouseup', 'dblclick']) {
          if (ev[t] && ev[t].some((h) => !h.selector)) return true;                   // direct, not delegated
        }
      }
    }
    return false;
  };

  // selectors of click-like jQuery handlers delegated from an element to its descendants
  const delegated = (el, win) => {
    const jq = win.jQuery;
    if (!jq || !jq._data) return null;
    const ev = jq._data(el, 'events');
    if (!ev) return null;
    const sels = [];
    for (const t of ['click', 'mousedown', 'mouseup', 'dblclick']) {
      if (ev[t]) for (const h of ev[t]) if (h.selector) sels.push(h.selector);
    }
    return sels.length ? sels : null;
  };
  const matchesAny = (el, sels) => {
    for (const s of sels) { try { if (el.matches(s)) return true; } catch (e) { /* a jQuery-only selector */ } }
    return false;
  };

  const isInteractive = (el, TAG, startsPointer, win, dsels) => {
    if (TAG === 'A') return el.hasAttribute('href') || startsPointer || hasHandler(el, win);
    if (TAG === 'BUTTON' || TAG === 'SELECT' || TAG === 'TEXTAREA' || TAG === 'SUMMARY') return true;
    if (TAG === 'INPUT') return el.type !== 'hidden';
    if (TAG === 'OPTION' || TAG === 'BODY' || TAG === 'HTML') return false;
    const role = el.getAttribute('role');
    if (role && ROLES.has(role)) return true;
    if (el.isContentEditable && !(el.parentElement && el.parentElement.isContentEditable)) return true;
    if (startsPointer) return true;
    if (dsels.length && matchesAny(el, dsels)) return true;
    if (el.hasAttribute('tabindex') && el.tabIndex >= 0 && TAG !== 'DIV' && TAG !== 'SPAN') return true;
    return hasHandler(el, win);
  };

  const children = (el, TAG) => {
    if (el.shadowRoot) { clearStamps(el.shadowRoot); return el.shadowRoot.childNodes; }
    if (TAG === 'SLOT') { const a = el.assignedNodes({flatten: true}); return a.length ? a : el.childNodes; }
    return el.childNodes;
  };

  // visit one element; push its output node (or, for a collapsed wrapper, its children) on `out`
  const visit = (el, ctx, parentPointer, out) => {
    const TAG = el.tagName.toUpperCase();
    if (SKIP.has(TAG)) return;
    if (el.id && exclude.has(el.id) && ctx.fp.length === 0) return;
    const r = el.getBoundingClientRect();
    const L = r.left + ctx.ox, T = r.top + ctx.oy, W = r.width, H = r.height;
    const c = ctx.clip;
    const sized = W > 0 && H > 0;
    const inView = sized && L < c.r && L + W > c.l && T < c.b && T + H > c.t;
    const root = TAG === 'HTML' || TAG === 'BODY';
    if (!inView && !root) {
      // outside the viewport, empty, or display:none: nothing of its own to show and no style lookup (the
      // expensive part on big pages); descendants may still be in view (overflow, positioned elements)
      if (TAG === 'IFRAME' || TAG === 'FRAME' || TAG === 'SELECT' || TAG === 'TEXTAREA' || !el.firstElementChild) return;
      // a box wholly beside the viewport in normal flow carries its descendants with it: prune it (what can
      // escape is a fixed/absolute descendant of it, which we accept to miss)
      if (sized && (T >= c.b || T + H <= c.t || L >= c.r || L + W <= c.l)) {
        const pos = ctx.win.getComputedStyle(el).position;
        if (pos === 'static' || pos === 'relative') return;
      } else if (!sized && ctx.win.getComputedStyle(el).display === 'none') {
        return;                                   // a hidden subtree (menus, templates): nothing to see
      }
      out.push(SEP);
      for (let ch = el.firstElementChild; ch; ch = ch.nextElementSibling) visit(ch, ctx, false, out);
      if (el.shadowRoot) for (const ch of el.shadowRoot.children) visit(ch, ctx, false, out);
      out.push(SEP);
      return;
    }
    const st = ctx.win.getComputedStyle(el);
    if (st.display === 'none') return;
    const hidden = st.visibility === 'hidden' || st.visibility === 'collapse';
    const shown = inView && !hidden;
    const pointer = st.cursor === 'pointer';
    let inter = shown && !root && isInteractive(el, TAG, pointer && !parentPointer, ctx.win, ctx.dsels);
    const node = {tag: TAG.toLowerCase(), TAG, el, inter, kids: [], own: false, text: false, attrs: [],
                  fp: ctx.fp, bbox: null};
    // children, clipped by this element when it clips its overflow
    let kctx = ctx;
    const dnew = delegated(el, ctx.win);
    if (dnew) kctx = Object.assign({}, ctx, {dsels: ctx.dsels.concat(dnew)});
    const clips = !root && (st.overflowX !== 'visible' || st.overflowY !== 'visible');
    if (clips && shown && (st.overflowY === 'auto' || st.overflowY === 'scroll')) {
      if (el.scrollTop > 1) moreAbove = true;
      if (el.scrollTop + el.clientHeight < el.scrollHeight - 1) moreBelow = true;
    }
    if (clips) {
      kctx = Object.assign({}, kctx, {clip: {l: Math.max(c.l, L), t: Math.max(c.t, T),
                                            r: Math.min(c.r, L + W), b: Math.min(c.b, T + H)}});
    }
    if (TAG === 'SELECT') {
      if (shown) {
        for (const o of el.options) {
          const s = clean(o.text);
          node.kids.push({tag: 'option', TAG: 'OPTION', el: o, inter: false, own: true, text: true,
                          kids: s ? [{txt: s}] : [], attrs: o.selected ? [['selected', 'true']] : [], fp: ctx.fp});
        }
      }
    } else if (TAG === 'TEXTAREA') {
      // its text is its value (an attribute below)
    } else if (TAG === 'IFRAME' || TAG === 'FRAME') {
      let doc = null;
      try { doc = el.contentDocument; } catch (e) { doc = null; }
      if (doc && doc.documentElement && shown) {
        const k = String(frameSeq++);
        el.setAttribute('data-webagent-frame', k);
        clearStamps(doc);
        const fctx = {win: doc.defaultView, fp: ctx.fp.concat([k]), dsels: [],
                      ox: L + el.clientLeft, oy: T + el.clientTop,
                      clip: {l: Math.max(c.l, L), t: Math.max(c.t, T), r: Math.min(c.r, L + W), b: Math.min(c.b, T + H)}};
        if (doc.body) visit(doc.body, fctx, false, node.kids);
      }
    } else if (!(clips && !inView)) {
      for (const ch of children(el, TAG)) {
        if (ch.nodeType === 3) {
          if (shown) {
            const s = clean(ch.data);
            // gl/gr: glued to the text before/after (no whitespace there in the page), e.g. "<b>x</b>"
            if (s) { node.kids.push({txt: s, gl: !/^\s/.test(ch.data), gr: !/\s$/.test(ch.data)}); node.own = true; }
          }
        } else if (ch.nodeType === 1) {
          visit(ch, kctx, pointer, node.kids);
        }
      }
    }
    for (const k of node.kids) { if (k.txt !== undefined || k.text) { node.text = true; break; } }
    // attributes
    if (shown) {
      for (const a of KEEP) {
        const v = el.getAttribute(a);
        if (v !== null && v !== '') node.attrs.push([a, v]);
      }
      if (!el.hasAttribute('title')) {
        const alt = el.getAttribute('aria-label') || (TAG === 'IMG' ? el.getAttribute('alt') : null);
        if (alt) node.attrs.unshift(['title', alt]);
      }
      if (TAG === 'TEXTAREA' || (TAG === 'INPUT' && !NOVALUE.has(el.type))) node.attrs.push(['value', el.value]);
      if (TAG === 'INPUT' && (el.type === 'checkbox' || el.type === 'radio')) {
        node.attrs.push(['data-status', el.checked ? 'checked' : 'not-checked']);
      } else {
        const ac = el.getAttribute('aria-checked'), as = el.getAttribute('aria-selected');
        if (ac === 'true' || ac === 'false') node.attrs.push(['data-status', ac === 'true' ? 'checked' : 'not-checked']);
        else if (as === 'true') node.attrs.push(['data-status', 'selected']);
      }
    }
    // a label whose control is itself shown needs no id of its own
    if (inter && TAG === 'LABEL' && el.control && el.control.getClientRects().length) inter = false;
    // an interactive wrapper around exactly one interactive element and nothing else: keep the inner one
    const solid = node.kids.filter((k) => !k.sep);
    if (inter && !node.own && solid.length === 1 && solid[0].inter && node.attrs.length === 0) inter = false;
    node.inter = inter;
    if (inter) {
      node.bbox = Math.round(L) + ',' + Math.round(T) + ',' + Math.round(W) + ',' + Math.round(H);
      if (!node.text && !node.attrs.some((a) => a[0] === 'title' || a[0] === 'value' || a[0] === 'placeholder')) {
        const cls = (el.getAttribute('class') || '').trim().split(/\s+/).slice(0, 3).join(' ') || el.id;
        if (cls) node.attrs.push(['class', cls]);   // a text-less control (icon): its class (or id) is the hint
      }
    }
    const keep = TAG === 'HTML' || inter || node.attrs.length > 0 || (SEMANTIC.has(TAG) && node.text)
      || (node.own && st.display !== 'inline' && st.display !== 'contents');
    if (keep) out.push(node);
    else if (st.display.startsWith('inline') || st.display === 'contents') for (const k of node.kids) out.push(k);
    else { out.push(SEP); for (const k of node.kids) out.push(k); out.push(SEP); }   // a block: no gluing across it
  };

  clearStamps(document);
  const top = [];
  visit(document.documentElement, {win: window, fp: [], dsels: [], ox: 0, oy: 0, clip: {l: 0, t: 0, r: vw, b: vh}}, false, top);

  // serialize in document order, numbering the labelled elements from 0 and stamping them
  const parts = [];
  const frames = {};
  let n = 0;
  const esc = (v) => String(v).replace(/\s+/g, ' ').replace(/"/g, '&quot;');
  let glue = false;               // may the next text be glued to the last part (no space)?
  const ser = (node) => {
    if (node.sep) { glue = false; return; }
    if (node.txt !== undefined) {
      const last = parts.length ? parts[parts.length - 1] : '';
      // glue "x<b>y</b>" when a side is punctuation ("<b>Ce</b>" in quotes); keep words apart ("Ann</span><span>9h")
      if (glue && node.gl && !(WORD.test(last[last.length - 1]) && WORD.test(node.txt[0]))) parts[parts.length - 1] += node.txt;
      else parts.push(node.txt);
      glue = !!node.gr;
      return;
    }
    glue = false;
    let open = '<' + node.tag;
    if (node.inter) {
      const id = n++;
      node.el.setAttribute('data-webagent-id', String(id));
      if (node.fp.length) frames[id] = node.fp;
      open += ' id="' + id + '"';
    }
    for (const [k, v] of node.attrs) open += ' ' + k + '="' + esc(v) + '"';
    if (node.inter) open += ' data-bbox="' + node.bbox + '"';
    parts.push(open + '>');
    for (const k of node.kids) ser(k);
    glue = false;
    if (!(VOID.has(node.TAG) && node.kids.length === 0)) parts.push('</' + node.tag + '>');
  };
  for (const node of top) ser(node);

  const se = document.scrollingElement || document.documentElement;
  return {
    text: parts.join(' '), n, frames, title: document.title,
    above: moreAbove, below: moreBelow || se.scrollHeight - (window.scrollY + vh) > 2,
    ms: performance.now() - t0,
  };
}
