/* The trials table's first page while plotly.js loads (trials.js takes it from
   `window.trialsFirst`), once the figures' data has come: a server that has not read the
   sweep yet serves that from a stored snapshot, and reading the sweep for the table
   meanwhile would slow it down. A file of its own, not an inline script, so that the
   pages pass a script-src 'self' policy. */
"use strict";

window.trialsFirst = (function (cfg) {
  const ask = () => fetch(cfg.tableUrl + "?" + cfg.limits.first_query,
    { headers: { Accept: "application/json" } });
  return window.sweepData ? window.sweepData.then(ask, ask) : ask();
})(JSON.parse(document.getElementById("trials-config").textContent));
window.trialsFirst.catch(function () {});
