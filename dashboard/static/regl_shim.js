/* plotly.js's WebGL scatter under a script-src 'self' policy.

   regl, which draws plotly.js's WebGL traces, writes the JavaScript of each drawing
   command at run time and compiles it with `Function`, which the Content-Security-Policy
   refuses (no 'unsafe-eval': `web.headers`). plotly.js's own answer is a "strict" bundle
   with that code compiled ahead; the plotly package ships only the regular bundle, so this
   page does the same with the regular one: `regl_code.js` holds the functions regl writes
   for the sweep page's figures, compiled ahead as part of a static file
   (`python -m tests.dashboard.regl_code` records them from the installed plotly.js), and
   this file puts a stand-in for the global `Function` that hands regl the function of
   the same source (`key`: its length and a 64-bit hash of the names and body regl
   passes). Any other source goes to the real `Function`, which the policy refuses as
   before, and says so on the console; the page then draws its WebGL traces as SVG
   (common.js, `SS.traces`), as it does from the start where WebGL lacks the features the
   recorded code was written for. Load it, and regl_code.js before it, before
   plotly.js draws. */
"use strict";

(function () {
  const Native = Function;
  const code = window.SweepstackReglCode || { functions: {} };

  /** The key of a `Function(name..., body)` call: the text's length and its cyrb53. */
  function key(args) {
    const text = args.join("\n");
    let h1 = 0xdeadbeef, h2 = 0x41c6ce57;
    for (let i = 0; i < text.length; i++) {
      const c = text.charCodeAt(i);
      h1 = Math.imul(h1 ^ c, 2654435761);
      h2 = Math.imul(h2 ^ c, 1597334677);
    }
    h1 = Math.imul(h1 ^ (h1 >>> 16), 2246822507) ^ Math.imul(h2 ^ (h2 >>> 13), 3266489909);
    h2 = Math.imul(h2 ^ (h2 >>> 16), 2246822507) ^ Math.imul(h1 ^ (h1 >>> 13), 3266489909);
    return text.length + "-" + (h2 >>> 0).toString(16).padStart(8, "0") +
      (h1 >>> 0).toString(16).padStart(8, "0");
  }

  function Compiled(...args) {
    const k = key(args.map(String));
    const recording = window.SweepstackReglRecord;  // set by tests.dashboard.regl_code
    if (recording) recording.push({ key: k, args: args.map(String) });
    const found = code.functions[k];
    if (found) return found;
    if (!recording) {
      console.error("regl_shim: no compiled code for " + k + " (plotly.js " +
        code.plotly + "); run python -m tests.dashboard.regl_code; drawing as SVG");
      // The page draws its WebGL traces as SVG from now on (common.js: SS.traces).
      setTimeout(() => window.dispatchEvent(new Event("sweepstack:regl-miss")), 0);
    }
    return Native.apply(this, args);
  }
  Compiled.prototype = Native.prototype;
  Compiled.key = key;
  window.Function = Compiled;
})();
