// parallel-planner page: posts the form to POST /v1/plans and shows the stored plan's
// report fragment; copy buttons for the launch artifacts; the "choose the cluster" form
// posts GPU types x counts to POST /v1/sweeps and shows its picture and table. No external
// scripts.
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
  // degrees and ZeRO, words for recompute and schedule, true/false for switches); null when
  // left empty.
  var BOOLS = { "true": true, "on": true, "yes": true, "false": false, "off": false, "no": false };
  function pinValues(input) {
    var words = input.value.split(",").map(function (w) { return w.trim(); }).filter(Boolean);
    if (!words.length) return null;
    var kind = input.getAttribute("data-kind");
    if (kind === "bool") return words.map(function (w) {
      var b = BOOLS[w.toLowerCase()];
      if (b === undefined) throw new Error("search." + input.getAttribute("data-field") + ": '" + w + "' is not true or false");
      return b;
    });
    if (kind !== "int") return words;
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
    var network = document.getElementById("network").value.trim();
    if (network) cluster.network = network;
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

// Choose the cluster (GET /sweep): GPU types x counts -> POST /v1/sweeps; the answer's SVG
// (cost vs time to train, the front drawn) and a table of every point, the front's rows and
// the chosen one marked, as the CLI's `planner sweep` table marks them.
(function () {
  "use strict";
  var form = document.getElementById("sweep-form");
  if (!form) return;
  var status = document.getElementById("sweep-status");
  var result = document.getElementById("sweep-result");

  function val(id) { return document.getElementById(id).value.trim(); }

  function headers() {
    var h = { "Content-Type": "application/json" };
    var token = val("token");
    if (token) h["Authorization"] = "Bearer " + token;
    return h;
  }

  function counts() {
    return val("sweep-counts").split(",").map(function (w) { return w.trim(); }).filter(Boolean).map(function (w) {
      if (!/^\d+$/.test(w)) throw new Error("sweep.num_gpus: '" + w + "' is not a whole number");
      return parseInt(w, 10);
    });
  }

  function request() {
    var gpus = [];
    form.querySelectorAll("input.sweep-gpu:checked").forEach(function (b) { gpus.push(b.value); });
    if (!gpus.length) throw new Error("sweep.gpu: tick at least one GPU type");
    var sweep = { gpu: gpus, num_gpus: counts() };
    var deadline = parseFloat(val("sweep-deadline"));
    if (deadline > 0) sweep.deadline_days = deadline;
    var budget = parseFloat(val("sweep-budget"));
    if (budget > 0) sweep.budget_usd = budget;
    var req = {
      engine: val("sweep-engine"),
      model: { name: val("sweep-preset") },
      cluster: { gpu: gpus[0], num_gpus: sweep.num_gpus[0] },
      training: { global_batch_size: parseInt(val("sweep-batch"), 10), seq_length: parseInt(val("sweep-seq"), 10),
                  total_tokens: parseInt(val("sweep-tokens"), 10) },
      sweep: sweep
    };
    var limit = parseFloat(val("sweep-time-limit"));
    if (limit > 0) req.search = { time_limit_s: limit };
    return req;
  }

  function cell(tr, text, cls) {
    var td = document.createElement("td");
    td.textContent = text;
    if (cls) td.className = cls;
    tr.appendChild(td);
  }

  function money(v) { return v == null ? "no price" : "$" + Math.round(v).toLocaleString("en-US"); }

  function table(out) {
    var t = document.createElement("table");
    t.className = "stages";
    t.id = "sweep-table";
    var head = document.createElement("tr");
    ["GPU", "GPUs", "degrees", "step (s)", "MFU", "days", "cost", ""].forEach(function (h) {
      var th = document.createElement("th"); th.textContent = h; head.appendChild(th);
    });
    var thead = document.createElement("thead"); thead.appendChild(head); t.appendChild(thead);
    var body = document.createElement("tbody");
    out.points.forEach(function (p, i) {
      var tr = document.createElement("tr");
      tr.setAttribute("data-index", String(i));
      tr.setAttribute("data-gpu", p.gpu || "");
      tr.setAttribute("data-num-gpus", String(p.num_gpus));
      if (p.on_front) tr.className = "front";
      if (p.chosen) tr.className += " chosen";
      cell(tr, p.gpu || "");
      cell(tr, String(p.num_gpus));
      if (!p.ok) {
        var td = document.createElement("td");
        td.colSpan = 6; td.className = "muted"; td.textContent = "no plan: " + p.error;
        tr.appendChild(td);
      } else {
        var par = p.parallelism, e = p.economics || {};
        cell(tr, "dp" + par.dp + " tp" + par.tp + " pp" + par.pp + (par.cp > 1 ? " cp" + par.cp : ""));
        cell(tr, p.step_time_s.toPrecision(3));
        cell(tr, (p.mfu * 100).toFixed(1) + "%");
        cell(tr, e.time_to_train_s == null ? "—" : (e.time_to_train_s / 86400).toPrecision(3));
        cell(tr, money(e.cost_usd));
        cell(tr, p.chosen ? "chosen" : (p.on_front ? "front" : ""), "mark");
      }
      body.appendChild(tr);
    });
    t.appendChild(body);
    return t;
  }

  function show(out) {
    result.innerHTML = "";
    var choice = document.createElement("p");
    choice.id = "sweep-choice";
    choice.textContent = out.choice;
    result.appendChild(choice);
    var fig = document.createElement("div");
    fig.className = "svg-wrap";
    fig.id = "sweep-figure";
    fig.innerHTML = out.svg;  // the service's own SVG (planner/report/cost_time.py), text escaped there
    result.appendChild(fig);
    var front = document.createElement("ol");
    front.id = "sweep-front";
    out.front.forEach(function (i) {
      var p = out.points[i];
      var li = document.createElement("li");
      li.setAttribute("data-gpu", p.gpu);
      li.setAttribute("data-num-gpus", String(p.num_gpus));
      li.textContent = p.num_gpus + " x " + p.gpu + ": " + (p.economics.time_to_train_s / 86400).toPrecision(3) +
        " days, " + money(p.economics.cost_usd);
      front.appendChild(li);
    });
    var h = document.createElement("h3"); h.textContent = "Pareto front (fastest first)";
    result.appendChild(h);
    result.appendChild(front);
    result.appendChild(table(out));
  }

  form.addEventListener("submit", function (ev) {
    ev.preventDefault();
    var body;
    try { body = request(); } catch (e) { result.textContent = e.message; return; }
    var button = document.getElementById("sweep-submit");
    button.disabled = true;
    status.textContent = "sweeping…";
    var t0 = performance.now();
    fetch("/v1/sweeps", { method: "POST", headers: headers(), body: JSON.stringify(body) })
      .then(function (r) { return r.json().then(function (j) { return { ok: r.ok, body: j }; }); })
      .then(function (res) {
        if (!res.ok) {
          var e = res.body && res.body.error;
          throw new Error(e ? e.message + (e.details && e.details.field ? " (" + e.details.field + ")" : "") : "sweep failed");
        }
        show(res.body);
        status.textContent = res.body.points.length + " points in " + ((performance.now() - t0) / 1000).toFixed(1) + " s";
      })
      .catch(function (e) {
        status.textContent = "";
        result.innerHTML = "";
        var d = document.createElement("div"); d.className = "error"; d.id = "sweep-error"; d.textContent = e.message;
        result.appendChild(d);
      })
      .finally(function () { button.disabled = false; });
  });
})();
