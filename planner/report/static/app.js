// parallel-planner page: posts the form to POST /v1/plans and shows the stored plan's
// report fragment; copy buttons for the launch artifacts. No external scripts.
(function () {
  "use strict";

  function copyText(id, button) {
    var el = document.getElementById(id);
    if (!el) return;
    var text = el.textContent;
    var done = function () {
      button.classList.add("done");
      button.textContent = "Copied";
      setTimeout(function () { button.classList.remove("done"); button.textContent = "Copy"; }, 1500);
    };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done, function () { fallback(el); done(); });
    } else { fallback(el); done(); }
  }

  function fallback(el) {
    var range = document.createRange();
    range.selectNodeContents(el);
    var sel = window.getSelection();
    sel.removeAllRanges();
    sel.addRange(range);
    try { document.execCommand("copy"); } catch (e) { /* the text stays selected */ }
  }

  document.addEventListener("click", function (ev) {
    var b = ev.target.closest && ev.target.closest("button.copy");
    if (b) copyText(b.getAttribute("data-copy"), b);
  });

  var form = document.getElementById("plan-form");
  if (!form) return;
  var status = document.getElementById("form-status");
  var result = document.getElementById("result");
  var preset = document.getElementById("preset");
  var hf = document.getElementById("hf-config");

  form.querySelectorAll("input[name=model-kind]").forEach(function (r) {
    r.addEventListener("change", function () {
      var cfg = form.querySelector("input[name=model-kind]:checked").value === "config";
      hf.hidden = !cfg;
      preset.hidden = cfg;
    });
  });

  function headers() {
    var h = { "Content-Type": "application/json" };
    var token = document.getElementById("token").value.trim();
    if (token) h["Authorization"] = "Bearer " + token;
    return h;
  }

  function int(id) { return parseInt(document.getElementById(id).value, 10); }

  // A pin's comma-separated allowed values, as the request spells them (whole numbers for
  // degrees and ZeRO, words for recompute and schedule); null when left empty.
  function pinValues(input) {
    var words = input.value.split(",").map(function (w) { return w.trim(); }).filter(Boolean);
    if (!words.length) return null;
    if (input.getAttribute("data-kind") !== "int") return words;
    return words.map(function (w) {
      if (!/^\d+$/.test(w)) throw new Error("search." + input.getAttribute("data-field") + ": '" + w + "' is not a whole number");
      return parseInt(w, 10);
    });
  }

  function search() {
    var s = {};
    var topK = int("top-k");
    if (topK) s.top_k = topK;
    var limit = parseFloat(document.getElementById("time-limit").value);
    if (limit > 0) s.time_limit_s = limit;
    form.querySelectorAll("input.pin").forEach(function (input) {
      var v = pinValues(input);
      if (v) s[input.getAttribute("data-field")] = v;
    });
    return s;
  }

  function model() {
    if (form.querySelector("input[name=model-kind]:checked").value !== "config") return { name: preset.value };
    try { return { hf_config: JSON.parse(hf.value) }; } catch (e) { throw new Error("config.json is not valid JSON: " + e.message); }
  }

  function request() {
    var cluster = { gpu: document.getElementById("gpu").value, num_gpus: int("num-gpus") };
    var perNode = int("gpus-per-node");
    if (perNode) cluster.gpus_per_node = Math.min(perNode, cluster.num_gpus);
    return {
      engine: document.getElementById("engine").value,
      model: model(),
      cluster: cluster,
      training: { global_batch_size: int("global-batch"), seq_length: int("seq-len"), dtype: document.getElementById("dtype").value },
      search: search()
    };
  }

  // An error banner: the message, and for an answer that says what to change (the
  // infeasible answer's details.suggestions, as the CLI prints them) those as a list.
  function showError(msg, suggestions, code) {
    result.innerHTML = "";
    var d = document.createElement("div");
    d.className = "error";
    d.id = "error";
    if (code) d.setAttribute("data-code", code);
    var p = document.createElement("p");
    p.className = "error-message";
    p.textContent = msg;
    d.appendChild(p);
    if (suggestions && suggestions.length) {
      var head = document.createElement("p");
      head.className = "error-head";
      head.textContent = "What could make it fit:";
      var ul = document.createElement("ul");
      ul.id = "suggestions";
      suggestions.forEach(function (s) {
        var li = document.createElement("li");
        li.textContent = s;
        ul.appendChild(li);
      });
      d.appendChild(head);
      d.appendChild(ul);
    }
    result.appendChild(d);
  }

  // An error answer of the API as an Error carrying its code and suggestions.
  function apiError(body) {
    var e = body && body.error;
    if (!e) return new Error("request failed");
    var details = e.details || {};
    var err = new Error((e.code === "infeasible" ? "infeasible: " : "") + e.message + (details.field ? " (" + details.field + ")" : ""));
    err.code = e.code;
    err.suggestions = Array.isArray(details.suggestions) ? details.suggestions : [];
    return err;
  }

  form.addEventListener("submit", function (ev) {
    ev.preventDefault();
    var body;
    try { body = request(); } catch (e) { showError(e.message); return; }
    var button = document.getElementById("submit");
    button.disabled = true;
    status.textContent = "planning…";
    var t0 = performance.now();
    fetch("/v1/plans", { method: "POST", headers: headers(), body: JSON.stringify(body) })
      .then(function (r) { return r.json().then(function (j) { return { ok: r.ok, body: j }; }); })
      .then(function (res) {
        if (!res.ok) throw apiError(res.body);
        var id = res.body.id;
        return fetch("/v1/plans/" + encodeURIComponent(id) + "/report.html?fragment=1", { headers: headers() })
          .then(function (r) { if (!r.ok) throw new Error("report: HTTP " + r.status); return r.text(); })
          .then(function (html) {
            result.innerHTML = html;
            // picture links are relative to the plan's report URL
            result.querySelectorAll("a.svg-link").forEach(function (a) {
              a.setAttribute("href", "/v1/plans/" + encodeURIComponent(id) + "/" + a.getAttribute("href"));
            });
            status.textContent = "plan " + id + " in " + ((performance.now() - t0) / 1000).toFixed(1) + " s";
          });
      })
      .catch(function (e) { status.textContent = ""; showError(e.message, e.suggestions, e.code); })
      .finally(function () { button.disabled = false; });
  });
})();
