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

  function request() {
    var model;
    if (form.querySelector("input[name=model-kind]:checked").value === "config") {
      model = { hf_config: JSON.parse(hf.value) };
    } else {
      model = { name: preset.value };
    }
    var cluster = { gpu: document.getElementById("gpu").value, num_gpus: int("num-gpus") };
    var perNode = int("gpus-per-node");
    if (perNode) cluster.gpus_per_node = Math.min(perNode, cluster.num_gpus);
    return {
      model: model,
      cluster: cluster,
      training: { global_batch_size: int("global-batch"), seq_length: int("seq-len") },
      search: { engine: document.getElementById("engine").value }
    };
  }

  function showError(msg) {
    result.innerHTML = "";
    var d = document.createElement("div");
    d.className = "error";
    d.id = "error";
    d.textContent = msg;
    result.appendChild(d);
  }

  form.addEventListener("submit", function (ev) {
    ev.preventDefault();
    var body;
    try { body = request(); } catch (e) { showError("config.json is not valid JSON: " + e.message); return; }
    var button = document.getElementById("submit");
    button.disabled = true;
    status.textContent = "planning…";
    var t0 = performance.now();
    fetch("/v1/plans", { method: "POST", headers: headers(), body: JSON.stringify(body) })
      .then(function (r) { return r.json().then(function (j) { return { ok: r.ok, body: j }; }); })
      .then(function (res) {
        if (!res.ok) {
          var e = res.body && res.body.error;
          throw new Error(e ? e.message + (e.details && e.details.field ? " (" + e.details.field + ")" : "") : "request failed");
        }
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
      .catch(function (e) { status.textContent = ""; showError(e.message); })
      .finally(function () { button.disabled = false; });
  });
})();
