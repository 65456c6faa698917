// taskling dashboard: auto-refresh of the page's content and the overrides form. No framework,
// no build step.
(function () {
  "use strict";
  var body = document.body;
  var refreshMS = parseInt(body.dataset.refreshMs, 10) || 2000;

  // The session lives in an HttpOnly cookie set by the server at sign-in: this script never sees
  // the token. Changes carry X-Taskling-Request, which a cross-site form cannot send.

  var refreshing = false;
  function refresh() {
    if (refreshing) { return Promise.resolve(); }
    refreshing = true;
    return fetch(location.href, { headers: { "X-Taskling-Partial": "1" }, cache: "no-store", credentials: "same-origin" })
      .then(function (r) {
        if (!r.ok) { throw new Error("HTTP " + r.status); }
        return r.text();
      })
      .then(function (html) {
        document.getElementById("content").innerHTML = html;
        document.getElementById("refresh-status").textContent = "updated " + new Date().toLocaleTimeString();
      })
      .catch(function (e) {
        document.getElementById("refresh-status").textContent = "refresh failed: " + e.message;
      })
      .finally(function () { refreshing = false; });
  }
  if (document.getElementById("content")) { setInterval(refresh, refreshMS); }

  function show(msg, ok) {
    var out = document.getElementById("form-status");
    out.textContent = msg;
    out.className = ok ? "ok" : "error";
  }

  function send(form, method, payload) {
    var init = { method: method, credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-Taskling-Request": "1" } };
    if (payload) { init.body = JSON.stringify(payload); }
    return fetch(form.dataset.api, init)
      .then(function (r) {
        return r.json().then(function (body) {
          if (!r.ok) { throw new Error(body.error ? body.error.message : "HTTP " + r.status); }
          return body;
        });
      })
      .then(function (task) {
        var limit = task.limit === -1 ? "unlimited" : String(task.limit);
        show("saved: limit " + limit + " (" + task.limit_source + ")", true);
        return refresh();
      })
      .catch(function (e) { show(e.message, false); });
  }

  var form = document.getElementById("limit-form");
  if (form) {
    form.addEventListener("submit", function (ev) {
      ev.preventDefault();
      var n = parseInt(document.getElementById("limit-input").value, 10);
      send(form, "PATCH", { concurrency_limit: n });
    });
    form.addEventListener("click", function (ev) {
      var action = ev.target.dataset && ev.target.dataset.action;
      if (action === "disable") { send(form, "PATCH", { enabled: false }); }
      if (action === "enable") { send(form, "PATCH", { enabled: true }); }
      if (action === "clear") { send(form, "DELETE", null); }
    });
  }

})();
