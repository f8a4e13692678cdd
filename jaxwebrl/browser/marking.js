// jaxwebrl element marking. Injected into every frame (context init script) so that each frame can
// give its interactive and text elements stable numeric ids (attribute data-jwid) and report them
// with role, accessible name, properties, visibility and bounding box. Ids come from a counter owned by
// the Python side so they are unique across frames and tabs; an element keeps its id as long as it lives.
(() => {
  if (window.__jaxwebrl) return;
  const ATTR = 'data-jwid';
  const SKIP = new Set(['SCRIPT', 'STYLE', 'NOSCRIPT', 'TEMPLATE', 'HEAD', 'META', 'LINK', 'TITLE', 'SVG', 'PATH']);
  const INTERACTIVE_TAGS = new Set(['A', 'BUTTON', 'INPUT', 'SELECT', 'TEXTAREA', 'OPTION', 'SUMMARY', 'IFRAME', 'FRAME']);
  const INTERACTIVE_ROLES = new Set(['button', 'link', 'checkbox', 'radio', 'textbox', 'searchbox', 'combobox',
    'option', 'menuitem', 'menuitemcheckbox', 'menuitemradio', 'tab', 'switch', 'slider', 'spinbutton',
    'listbox', 'treeitem', 'gridcell']);
  // Leaves: their descendants are folded into their name (a link's text, a button's label).
  const LEAF_TAGS = new Set(['A', 'BUTTON', 'OPTION', 'SUMMARY', 'TEXTAREA']);
  const LEAF_ROLES = new Set(['button', 'link', 'option', 'menuitem', 'tab', 'checkbox', 'radio', 'switch']);
  const TAG_ROLE = {
    A: 'link', BUTTON: 'button', SELECT: 'combobox', TEXTAREA: 'textbox', OPTION: 'option',
    H1: 'heading', H2: 'heading', H3: 'heading', H4: 'heading', H5: 'heading', H6: 'heading',
    IMG: 'img', LI: 'listitem', TD: 'cell', TH: 'columnheader', P: 'paragraph', LABEL: 'LabelText',
    SUMMARY: 'button', IFRAME: 'Iframe', FRAME: 'Iframe', DIALOG: 'dialog', CAPTION: 'caption',
    LEGEND: 'legend', DT: 'term', DD: 'definition', PRE: 'code', CODE: 'code', B: 'strong',
    STRONG: 'strong', EM: 'emphasis', I: 'emphasis',
  };
  const INPUT_ROLE = {
    checkbox: 'checkbox', radio: 'radio', button: 'button', submit: 'button', reset: 'button',
    image: 'button', range: 'slider', number: 'spinbutton', search: 'searchbox',
  };
  const clean = (s, n) => {
    s = (s || '').replace(/\s+/g, ' ').trim();
    return s.length > n ? s.slice(0, n) + '...' : s;
  };
  const roleOf = (el) => {
    const r = el.getAttribute('role');
    if (r) return r.split(' ')[0];
    if (el.tagName === 'INPUT') {
      const t = (el.getAttribute('type') || 'text').toLowerCase();
      if (t === 'hidden') return null;
      return INPUT_ROLE[t] || 'textbox';
    }
    if (el.tagName === 'A' && !el.hasAttribute('href')) return el.onclick || el.hasAttribute('onclick') ? 'link' : 'generic';
    return TAG_ROLE[el.tagName] || 'generic';
  };
  const isInteractive = (el, role) => {
    if (INTERACTIVE_TAGS.has(el.tagName)) {
      if (el.tagName === 'INPUT' && (el.getAttribute('type') || '').toLowerCase() === 'hidden') return false;
      return true;
    }
    if (INTERACTIVE_ROLES.has(role)) return true;
    if (el.hasAttribute('onclick') || el.isContentEditable) return true;
    const ti = el.getAttribute('tabindex');
    return ti !== null && parseInt(ti, 10) >= 0;
  };
  const ownText = (el) => {
    let s = '';
    for (const c of el.childNodes) if (c.nodeType === 3) s += c.textContent + ' ';
    return s;
  };
  const nameOf = (el, role) => {
    const al = el.getAttribute('aria-label');
    if (al && al.trim()) return clean(al, 200);
    const lb = el.getAttribute('aria-labelledby');
    if (lb) {
      const t = lb.split(/\s+/).map((i) => { const e = document.getElementById(i); return e ? e.innerText || e.textContent : ''; }).join(' ');
      if (t.trim()) return clean(t, 200);
    }
    if (el.labels && el.labels.length) {
      const t = Array.from(el.labels).map((l) => l.innerText || l.textContent).join(' ');
      if (t.trim()) return clean(t, 200);
    }
    if (el.tagName === 'INPUT') {
      const t = (el.getAttribute('type') || '').toLowerCase();
      if (['button', 'submit', 'reset'].includes(t)) return clean(el.value || t, 200);
    }
    for (const a of ['placeholder', 'title', 'alt']) {
      const v = el.getAttribute(a);
      if (v && v.trim()) return clean(v, 200);
    }
    if (el.tagName === 'IMG') return '';
    if (el.tagName === 'SELECT' || el.tagName === 'INPUT' || el.tagName === 'TEXTAREA') return '';
    if (el.tagName === 'IFRAME' || el.tagName === 'FRAME') return clean(el.getAttribute('name') || '', 200);
    if (LEAF_TAGS.has(el.tagName) || LEAF_ROLES.has(role) || role === 'heading') return clean(el.innerText || el.textContent, 200);
    return clean(ownText(el), 500);
  };
  const visibleOf = (el, rect) => {
    if (el.tagName === 'OPTION') {
      const sel = el.closest('select');
      return sel ? visibleOf(sel, sel.getBoundingClientRect()) : false;
    }
    if (rect.width <= 0 || rect.height <= 0) return false;
    const cs = getComputedStyle(el);
    return cs.visibility !== 'hidden' && cs.display !== 'none' && parseFloat(cs.opacity || '1') > 0.01;
  };
  const keepAttrs = (el) => {
    const out = {};
    for (const a of ['type', 'href', 'name', 'placeholder', 'alt', 'title', 'aria-label', 'for', 'role']) {
      const v = el.getAttribute(a);
      if (v !== null && v !== '') out[a] = v.length > 200 ? v.slice(0, 200) : v;
    }
    return out;
  };

  function mark(nextId, opts) {
    const seen = new Set();
    const nodes = [];
    const active = document.activeElement;
    const vw = window.innerWidth, vh = window.innerHeight;
    const walk = (el, depth, inLeaf) => {
      if (SKIP.has(el.tagName.toUpperCase())) return;
      const cs = el.tagName === 'OPTION' ? null : getComputedStyle(el);
      if (cs && cs.display === 'none') return;
      const role = roleOf(el);
      if (role === null) return;
      const interactive = isInteractive(el, role);
      const text = ownText(el).replace(/\s+/g, ' ').trim();
      const keep = interactive || (!inLeaf && (text.length > 0 || role === 'img' || role === 'heading'));
      let childDepth = depth;
      if (keep) {
        let id = el.getAttribute(ATTR);
        if (id === null || seen.has(id)) { id = String(nextId++); el.setAttribute(ATTR, id); }
        seen.add(id);
        const rect = el.getBoundingClientRect();
        const visible = visibleOf(el, rect);
        const props = {};
        if (el.tagName === 'INPUT' || el.tagName === 'TEXTAREA' || el.tagName === 'SELECT') {
          props.required = !!el.required;
          if (el.disabled) props.disabled = true;
          const t = (el.getAttribute('type') || '').toLowerCase();
          if (t === 'checkbox' || t === 'radio') props.checked = !!el.checked;
          else if (el.tagName === 'SELECT') props.value = el.selectedIndex >= 0 ? clean(el.options[el.selectedIndex].text, 100) : '';
          else if (el.value) props.value = t === 'password' ? '*'.repeat(el.value.length) : clean(el.value, 200);
        }
        if (el.tagName === 'OPTION') props.selected = !!el.selected;
        if (el.tagName === 'BUTTON' && el.disabled) props.disabled = true;
        if (el.tagName === 'A' && el.href) props.url = el.href;
        if (el.tagName === 'DETAILS' || el.hasAttribute('aria-expanded')) props.expanded = el.open || el.getAttribute('aria-expanded') === 'true';
        if (el === active && el !== document.body) props.focused = true;
        nodes.push({
          id, tag: el.tagName.toLowerCase(), role: interactive || role !== 'generic' ? role : 'StaticText',
          name: nameOf(el, role), text: clean(text, 500), depth, visible, interactive,
          in_viewport: visible && rect.right > 0 && rect.bottom > 0 && rect.left < vw && rect.top < vh,
          bbox: [rect.left, rect.top, rect.width, rect.height], props, attrs: keepAttrs(el),
          is_frame: el.tagName === 'IFRAME' || el.tagName === 'FRAME',
        });
        childDepth = depth + 1;
      }
      const leaf = inLeaf || (keep && (LEAF_TAGS.has(el.tagName) || LEAF_ROLES.has(role)));
      for (const c of el.children) walk(c, childDepth, leaf);
      if (el.shadowRoot) for (const c of el.shadowRoot.children) walk(c, childDepth, leaf);
    };
    if (document.body) walk(document.body, 0, false);
    let focused = null;
    if (active && active !== document.body && active.getAttribute) focused = active.getAttribute(ATTR);
    return {
      next_id: nextId, nodes, focused, url: location.href, title: document.title,
      scroll: [window.scrollX, window.scrollY], size: [document.documentElement.scrollWidth, document.documentElement.scrollHeight],
      viewport: [vw, vh],
    };
  }

  // Describe the element under a point (for coordinate-action feedback).
  function describeAt(x, y) {
    const el = document.elementFromPoint(x, y);
    if (!el) return null;
    return describe(el);
  }
  function describe(el) {
    const role = roleOf(el) || 'generic';
    return { tag: el.tagName.toLowerCase(), role, name: nameOf(el, role) || clean(el.innerText || '', 80), id: el.getAttribute(ATTR) };
  }
  function focusedInfo() {
    const el = document.activeElement;
    if (!el || el === document.body) return null;
    const d = describe(el);
    d.value = 'value' in el ? String(el.value) : (el.isContentEditable ? el.innerText : null);
    d.editable = isEditable(el);
    return d;
  }
  // Text can be typed into it: a text-like <input>, a <textarea> or a contenteditable element, enabled and
  // not read-only. Buttons, checkboxes and selects have a `value` but take no typing.
  const TEXT_INPUTS = new Set(['', 'text', 'search', 'email', 'url', 'tel', 'password', 'number', 'date',
    'datetime-local', 'month', 'week', 'time']);
  function isEditable(el) {
    const tag = el.tagName.toLowerCase();
    if (tag === 'textarea') return !el.disabled && !el.readOnly;
    if (tag === 'input') return TEXT_INPUTS.has((el.getAttribute('type') || '').toLowerCase()) && !el.disabled && !el.readOnly;
    return !!el.isContentEditable;
  }
  Object.defineProperty(window, '__jaxwebrl', { value: { mark, describeAt, focusedInfo }, enumerable: false });
})();
