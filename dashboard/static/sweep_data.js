/* The sweep page's first request, made as soon as the page's head is read: the figures'
   data, asked for while plotly.js loads (sweep.js takes it from `window.sweepData`). A file
   of its own, not an inline script, so that the pages pass a script-src 'self' policy. */
"use strict";

window.sweepData = fetch(JSON.parse(document.getElementById("config").textContent).dataUrl)
  .then(function (r) {
    return r.ok ? r.json() : r.json().then(function (b) {
      throw new Error(b.error ? b.error.message : r.statusText);
    });
  });
window.sweepData.catch(function () {});
