// One page round trip per lookup: of a locator's matches, take the first one that is rendered (else the
// first), and return its label and, when it has none, where it is.
// - label: the element's own data-webagent-id, else its single labelled descendant (a <label> wrapping an
//   <input>), else a labelled ancestor with exactly the same text (a list item around its name); never a
//   container with more in it (a labelled e-mail row around an unlabelled, scrolled-away star icon is a
//   different element).
// - where: 'hidden' (not rendered), 'down' / 'up' (wholly or partly scrolled out of its scrolling
//   container or of the window: the env may leave out an element that only peeks into view), 'shown'
//   (on screen now: the page changed after the observation was taken).
els => {
  if (els.length === 0) return null;
  const rendered = (e) => { const r = e.getBoundingClientRect();
    return r.width > 0 && r.height > 0 && getComputedStyle(e).visibility !== 'hidden'; };
  const text = (e) => e.textContent.replace(/\s+/g, ' ').trim();
  const el = els.find(rendered) || els[0];
  const label = (() => {
    const own = el.getAttribute('data-webagent-id');
    if (own !== null) return own;
    const inner = el.querySelectorAll('[data-webagent-id]');
    if (inner.length === 1) return inner[0].getAttribute('data-webagent-id');
    const outer = el.parentElement && el.parentElement.closest('[data-webagent-id]');
    if (outer && text(el) !== '' && text(outer) === text(el)) return outer.getAttribute('data-webagent-id');
    return null;
  })();
  const where = (() => {
    if (!rendered(el)) return 'hidden';
    const r = el.getBoundingClientRect();
    for (let p = el.parentElement; p; p = p.parentElement) {
      const oy = getComputedStyle(p).overflowY;
      if ((oy === 'auto' || oy === 'scroll') && p.scrollHeight > p.clientHeight) {
        const q = p.getBoundingClientRect();
        if (r.bottom > q.bottom + 1) return 'down';
        if (r.top < q.top - 1) return 'up';
      }
    }
    if (r.bottom > innerHeight + 1) return 'down';
    if (r.top < -1) return 'up';
    return 'shown';
  })();
  return {label, where, n: els.length};
}
