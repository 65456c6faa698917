// taskling dashboard: auto-refresh of the page's content, the overrides form, the Cancel
// buttons of submissions and the Force buttons of blocks. No framework, no build step.
(function () {
  "use strict";
  var body = document.body;
  var refreshMS = parseInt(body.dataset.refreshMs, 10) || 2000;

  // The session lives in an HttpOnly cookie set by the server at sign-in: this script never sees
  // the token. Changes carry X-Taskling-Request, which a cross-site form cannot send.

  // A refresh replaces the buttons in the content: never between a press and its release, which
  // would lose the click.
  var pressed = false;
  document.addEventListener("pointerdown", function () { pressed = true; }, true);
  document.addEventListener("pointerup", function () { pressed = false; }, true);
  document.addEventListener("pointercancel", function () { pressed = false; }, true);
  window.addEventListener("blur", function () { pressed = false; });

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
        if (pressed || typing()) { return; } // the next interval brings it
        // The page's summary and its content, around the forms (which the refresh leaves alone).
        var parts = new DOMParser().parseFromString(html, "text/html");
        [["summary", "summary-part"], ["content", "content-part"]].forEach(function (p) {
          var into = document.getElementById(p[0]), from = parts.getElementById(p[1]);
          if (into && from) { into.replaceChildren.apply(into, Array.prototype.slice.call(from.childNodes)); }
        });
        document.getElementById("refresh-status").textContent = "updated " + utcClock(new Date());
      })
      .catch(function (e) {
        document.getElementById("refresh-status").textContent = "refresh failed: " + e.message;
      })
      .finally(function () { refreshing = false; });
  }
  // The time of day as the pages' tables show times: UTC, 24-hour ("15:04:05Z").
  function utcClock(d) { return d.toISOString().slice(11, 19) + "Z"; }
  // Nor while a field of the content is being filled in, which would lose what was typed.
  function typing() {
    var a = document.activeElement;
    return !!a && /^(INPUT|TEXTAREA|SELECT)$/.test(a.tagName) && document.getElementById("content").contains(a);
  }
  // The sign-in page has nothing to refresh: a refresh would replace its form, and the token typed.
  if (document.getElementById("content") && !document.getElementById("login-form")) { setInterval(refresh, refreshMS); }

  function show(id, msg, ok) {
    var out = document.getElementById(id);
    if (!out) { return; }
    out.textContent = msg;
    out.className = ok ? "ok" : "error";
  }

  // api sends a change to the JSON API and resolves to the answer's body.
  function api(url, method, payload) {
    var init = { method: method, credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-Taskling-Request": "1" } };
    if (payload) { init.body = JSON.stringify(payload); }
    return fetch(url, init).then(function (r) {
      return r.json().then(function (body) {
        if (!r.ok) { throw new Error(body.error ? body.error.message : "HTTP " + r.status); }
        return body;
      });
    });
  }

  function send(form, method, payload) {
    return api(form.dataset.api, method, payload)
      .then(function (task) {
        var limit = task.limit === -1 ? "unlimited" : String(task.limit);
        show("form-status", "saved: limit " + limit + " (" + task.limit_source + ")", true);
        return refresh();
      })
      .catch(function (e) { show("form-status", e.message, false); });
  }

  // Cancel buttons live in the refreshed content, so one listener on the document serves them.
  document.addEventListener("click", function (ev) {
    var button = ev.target.closest ? ev.target.closest("button[data-cancel-api]") : null;
    if (!button) { return; }
    button.disabled = true;
    api(button.dataset.cancelApi, "POST", { reason: "cancelled from the dashboard" })
      .then(function (sub) {
        var what = sub.status === "cancelled" ? "cancelled" : "cancel requested (" + sub.status + ")";
        show("cancel-status", "submission #" + sub.id + ": " + what, true);
        return refresh();
      })
      .catch(function (e) {
        button.disabled = false;
        show("cancel-status", e.message, false);
      });
  });

  // Force buttons of blocks (the task page's blocks at their retry limit, a block's page): the
  // next execution of the block's task that asks for its kind takes it first.
  document.addEventListener("click", function (ev) {
    var button = ev.target.closest ? ev.target.closest("button[data-force-api]") : null;
    if (!button) { return; }
    button.disabled = true;
    api(button.dataset.forceApi, "POST", null) // recorded as made by the signed-in principal
      .then(function (block) {
        show("force-status", "block #" + block.id + ": " + (block.force_pending ? "forced" : "force taken (" + block.status + ")"), true);
        return refresh();
      })
      .catch(function (e) {
        button.disabled = false;
        show("force-status", e.message, false);
      });
  });

  // The tasks list's filters are a plain GET form; a changed select shows its page at once.
  var filters = document.getElementById("task-filters");
  if (filters) {
    filters.addEventListener("change", function (ev) {
      if (ev.target.tagName === "SELECT") { filters.submit(); }
    });
  }

  // The key form sets or clears the operator's override of one key's limit and rate.
  var keyForm = document.getElementById("key-form");
  if (keyForm) {
    // The key goes in the query: in the path, "." and ".." would be dropped by the browser
    // (keys/. is keys/), and the empty key would be ambiguous.
    var keyURL = function () {
      var u = new URL(keyForm.dataset.api, document.baseURI);
      u.searchParams.set("key", document.getElementById("key-input").value);
      return u.href;
    };
    var keySaved = function (task) {
      show("key-form-status", "saved: " + task.keys_total + " keys", true);
      return refresh();
    };
    keyForm.addEventListener("submit", function (ev) {
      ev.preventDefault();
      var body = {};
      var limit = document.getElementById("key-limit-input").value;
      var rate = document.getElementById("key-rate-input").value;
      if (limit !== "") { body.limit = parseInt(limit, 10); }
      if (rate !== "") { body.rate = rate; }
      api(keyURL(), "PUT", body).then(keySaved)
        .catch(function (e) { show("key-form-status", e.message, false); });
    });
    keyForm.addEventListener("click", function (ev) {
      if (!(ev.target.dataset && ev.target.dataset.action === "clear-key")) { return; }
      api(keyURL(), "DELETE", null).then(keySaved)
        .catch(function (e) { show("key-form-status", e.message, false); });
    });
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
      if (action === "set-rate") { send(form, "PATCH", { rate: document.getElementById("rate-input").value }); }
    });
  }

})();
