// One way to build SVG for the operations page's drawings (charts.js, workflow-graph.js,
// timeline.js): element by element, strings as text nodes, never markup; colours come from classes
// in app.css, since the page's Content-Security-Policy refuses style attributes.
'use strict';

(function () {
  const NS = 'http://www.w3.org/2000/svg';

  /** An SVG element with attributes (null and undefined left out) and children. */
  function svg(tag, attrs, ...children) {
    const node = document.createElementNS(NS, tag);
    for (const [name, value] of Object.entries(attrs || {}))
      if (value !== undefined && value !== null) node.setAttribute(name, String(value));
    for (const child of children.flat())
      if (child !== undefined && child !== null && child !== false)
        node.append(typeof child === 'string' ? document.createTextNode(child) : child);
    return node;
  }

  globalThis.CycliumSvg = { svg };
})();
