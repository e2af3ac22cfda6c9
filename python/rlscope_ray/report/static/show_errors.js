// First, so that errors in the drawing script below are visible on the page.
(function () {
  function show(msg) {
    var pre = document.getElementById("errors");
    if (pre) pre.appendChild(document.createTextNode(String(msg) + "\n"));
  }
  window.onerror = function (msg, src, line, col) { show(msg + " (line " + line + ":" + col + ")"); };
  window.addEventListener("unhandledrejection", function (e) {
    var r = e.reason; show("unhandled rejection: " + (r && r.message ? r.message : r));
  });
  window.rlsShowError = show;
})();
