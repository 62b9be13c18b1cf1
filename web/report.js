// sonde report: draws the page from the JSON in #sonde-data with uPlot (inlined before this
// script). Everything is local: no request leaves the page. The test hook is window.sondeReport.
(function () {
  "use strict";
  var errors = [];
  window.addEventListener("error", function (e) { errors.push(String(e.message)); });

  // The data: JSON, or gzip + base64 (sonde's default) inflated by the browser itself.
  function loadData() {
    var node = document.getElementById("sonde-data");
    if (node.getAttribute("data-encoding") !== "gzip+base64")
      return Promise.resolve(JSON.parse(node.textContent));
    var bin = atob(node.textContent.trim());
    var bytes = new Uint8Array(bin.length);
    for (var i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    return new Response(stream).text().then(JSON.parse);
  }
  var app = document.getElementById("app");
  loadData().then(render, function (e) {
    errors.push(String(e));
    app.textContent = "sonde report: cannot read the embedded data (" + e + "). This page needs " +
      "a browser with DecompressionStream (Chromium 80+, Firefox 113+, Safari 16.4+).";
    window.sondeReport = { errors: errors, ready: false, failed: true };
  });

  function render(data) {
    var meta = data.meta, summary = data.summary;
    app.textContent = "";

    var PALETTE = ["#2563eb", "#dc2626", "#16a34a", "#d97706", "#7c3aed", "#0891b2", "#db2777",
      "#65a30d", "#ea580c", "#4f46e5", "#0d9488", "#b91c1c", "#9333ea", "#ca8a04", "#0284c7",
      "#be185d"];
    var LEVEL_TITLES = { process: "process tree", user: "user", slurm: "Slurm job", system: "node" };
    var PHASE_COLORS = ["rgba(37,99,235,0.10)", "rgba(22,163,74,0.10)", "rgba(217,119,6,0.10)",
      "rgba(219,39,119,0.10)", "rgba(8,145,178,0.10)"];

    function el(tag, attrs, children) {
      var e = document.createElement(tag);
      if (attrs) for (var k in attrs) {
        if (k === "text") e.textContent = attrs[k];
        else if (k === "class") e.className = attrs[k];
        else e.setAttribute(k, attrs[k]);
      }
      (children || []).forEach(function (c) { if (c) e.appendChild(c); });
      return e;
    }
    function num(v, unit) {
      if (v === null || v === undefined || !isFinite(v)) return "–";
      var a = Math.abs(v), s;
      if (a >= 1000) s = Math.round(v).toLocaleString("en-US");
      else if (a >= 100) s = v.toFixed(0);
      else if (a >= 10) s = v.toFixed(1);
      else s = v.toFixed(2);
      return unit ? s + " " + unit : s;
    }
    function bytes(b) {
      if (b === null || b === undefined || !isFinite(b)) return "–";
      var u = ["B", "KiB", "MiB", "GiB", "TiB"], i = 0;
      while (Math.abs(b) >= 1024 && i < u.length - 1) { b /= 1024; i++; }
      return (i === 0 ? b.toFixed(0) : b.toFixed(1)) + " " + u[i];
    }
    function joules(j) {
      if (j === null || j === undefined || !isFinite(j)) return "–";
      if (Math.abs(j) >= 1e6) return (j / 1e6).toFixed(2) + " MJ";
      if (Math.abs(j) >= 1e3) return (j / 1e3).toFixed(2) + " kJ";
      return j.toFixed(1) + " J";
    }
    function duration(s) {
      if (s === null || s === undefined || !isFinite(s)) return "–";
      if (s < 60) return s.toFixed(s < 10 ? 2 : 1) + " s";
      var h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = Math.round(s % 60);
      return (h ? h + " h " : "") + m + " min " + sec + " s";
    }
    function shellQuote(args) {
      return (args || []).map(function (a) {
        return /^[\w@%+=:,./-]+$/.test(a) ? a : "'" + String(a).replace(/'/g, "'\\''") + "'";
      }).join(" ");
    }
    function dateText(epoch) {
      if (!isFinite(epoch)) return "–";
      var d = new Date(epoch * 1000);
      function p(n) { return (n < 10 ? "0" : "") + n; }
      return d.getFullYear() + "-" + p(d.getMonth() + 1) + "-" + p(d.getDate()) + " " +
        p(d.getHours()) + ":" + p(d.getMinutes()) + ":" + p(d.getSeconds());
    }

    // ---- header --------------------------------------------------------------------------------
    var cmd = shellQuote(meta.command);
    // record --pid: the watched process's command line (the manifest's target_command).
    if (!cmd && meta.target_command && meta.target_command.length)
      cmd = "pid " + meta.target_pid + ": " + shellQuote(meta.target_command);
    var exit = meta.exit_status;
    var exitText = exit === null || exit === undefined ? "–" :
      exit > 128 ? exit + " (signal " + (exit - 128) + ")" : String(exit);
    var header = el("header", { class: "top" }, [
      el("div", { class: "brand", text: "sonde report" }),
      el("h1", { class: "command", text: cmd || (meta.mode === "record" ? "recorded node" : "run") }),
    ]);
    var facts = [
      ["exit status", exitText, exit === 0 ? "ok" : exit === null || exit === undefined ? "" : "bad"],
      ["duration", duration(summary.wall_s)],
      ["started", dateText(meta.start_wallclock)],
      ["host", meta.host || "–"],
      ["interval", meta.interval ? meta.interval + " s" : "–"],
      ["CPUs", meta.node && meta.node.num_cpus !== undefined ?
        meta.node.num_cpus + (meta.node.num_system_cpus !== meta.node.num_cpus ?
          " of " + meta.node.num_system_cpus : "") : "–"],
    ];
    if (data.nodes && data.nodes.length) {
      // A multi-node run: the job's CPUs over its nodes (the head's are one node's).
      var jobCpus = 0;
      (summary.nodes || []).forEach(function (n) { jobCpus += n.num_cpus || 0; });
      facts[5] = ["CPUs", jobCpus + " on " + data.nodes.length + " nodes"];
      facts.push(["job", String((meta.multinode || {}).job || "–")]);
    }
    if (meta.node && meta.node.num_gpus) facts.push(["GPUs", meta.node.num_gpus + " × " +
      (meta.node.gpu_name || "GPU")]);
    if (meta.complete === false) facts.push(["state", "incomplete (interrupted)", "bad"]);
    // What the manifest says happened (a command that was not started, facts of the run).
    (meta.notes || []).forEach(function (n) { facts.push(["note", n]); });
    var factList = el("dl", { class: "facts" });
    facts.forEach(function (f) {
      factList.appendChild(el("div", { class: "fact " + (f[2] || "") }, [
        el("dt", { text: f[0] }), el("dd", { text: f[1] })]));
    });
    header.appendChild(factList);
    var tagBox = el("div", { class: "tags", id: "tags" });
    (summary.tags || []).forEach(function (t) {
      tagBox.appendChild(el("span", { class: "tag tag-" + t, text: t }));
    });
    if (!summary.tags || !summary.tags.length)
      tagBox.appendChild(el("span", { class: "tag tag-none", text: "no bottleneck tags" }));
    header.appendChild(tagBox);
    app.appendChild(header);

    // ---- summary table (mean / min / max / limit per level, like JUmPER's report) -------------
    var GROUPS = [["cpu", "CPU utilisation", "%"], ["cpu_cores", "CPU", "cores"],
      ["memory", "Memory", "GiB"], ["gpu_util", "GPU utilisation of the GPUs used", "%"],
      ["gpu_band", "GPU memory bandwidth", "%"], ["gpu_mem", "GPU memory, peak on one GPU", "GiB"]];
    var levelNames = data.levels.map(function (l) { return l.level; });
    var table = el("table", { class: "summary", id: "summary-table" });
    table.appendChild(el("thead", null, [el("tr", null, ["Metric", "Level", "Mean", "Min", "Max",
      "Limit"].map(function (h) { return el("th", { text: h }); }))]));
    var tbody = el("tbody");
    GROUPS.forEach(function (g) {
      var rows = levelNames.filter(function (l) {
        var L = summary.levels[l];
        return L && L.groups && L.groups[g[0]];
      });
      rows.forEach(function (l, i) {
        var s = summary.levels[l].groups[g[0]];
        var tr = el("tr", { class: i === 0 ? "first" : "" });
        if (i === 0) tr.appendChild(el("th", { rowspan: rows.length, scope: "rowgroup",
          text: g[1] + " (" + g[2] + ")" }));
        tr.appendChild(el("td", { class: "lvl", text: l }));
        ["mean", "min", "max", "limit"].forEach(function (k) {
          tr.appendChild(el("td", { class: "n", text: num(s[k]) }));
        });
        tbody.appendChild(tr);
      });
    });
    table.appendChild(tbody);
    var totals = el("table", { class: "summary totals" });
    // Energy (the energy collector; meta.energy per level): J, kWh and the CO2 estimate.
    var energy = meta.energy || {};
    var hasEnergy = Object.keys(energy).length > 0;
    var totalHeads = ["Level", "Read", "Written", "Sent", "Received", "CPU time"];
    if (hasEnergy) totalHeads = totalHeads.concat(["Energy", "CO2"]);
    totals.appendChild(el("thead", null, [el("tr", null, totalHeads.map(function (h) {
      return el("th", { text: h }); }))]));
    var tb2 = el("tbody");
    levelNames.forEach(function (l) {
      var L = summary.levels[l] || {}, T = L.totals || {};
      var cells = [el("td", { class: "lvl", text: l }),
        el("td", { class: "n", text: bytes(T.read_bytes) }),
        el("td", { class: "n", text: bytes(T.written_bytes) }),
        el("td", { class: "n", text: bytes(T.net_sent_bytes) }),
        el("td", { class: "n", text: bytes(T.net_recv_bytes) }),
        el("td", { class: "n", text: L.cpu_seconds !== undefined ? duration(L.cpu_seconds) : "–" })];
      if (hasEnergy) {
        var E = energy[l];
        cells.push(el("td", { class: "n energy", text: E ? joules(E.joules) + " (" +
          E.kwh.toPrecision(3) + " kWh)" : "–" }));
        cells.push(el("td", { class: "n co2", text: E && E.co2_g !== null ?
          E.co2_g.toPrecision(3) + " g" : "–" }));
      }
      tb2.appendChild(el("tr", null, cells));
    });
    totals.appendChild(tb2);
    app.appendChild(el("section", { class: "card" }, [el("h2", { text: "Summary" }),
      el("div", { class: "tables" }, [table, el("div", null, [
        el("h3", { text: "Totals (I/O and network rates integrated over time" + (hasEnergy ?
          "; energy over the domains that do not overlap, CO2 at " +
          ((meta.node.energy || {}).carbon_intensity_g_per_kwh) + " g/kWh" : "") + ")" }),
        totals])])]));

    // ---- multi-node runs: one row per node (summary.nodes) -----------------------------------
    var nodes = data.nodes || [];
    if (nodes.length) {
      var nodeRows = summary.nodes || [];
      var nt = el("table", { class: "summary nodes", id: "node-table" });
      nt.appendChild(el("thead", null, [el("tr", null, ["Node", "Status", "CPUs", "CPU avg",
        "CPU peak", "Memory peak", "Memory limit", "Read", "Written", "GPUs", "Clock offset",
        "Rows", "Tags"].map(function (h) { return el("th", { text: h }); }))]));
      var ntb = el("tbody");
      nodeRows.forEach(function (n) {
        var status = n.status || "complete";
        ntb.appendChild(el("tr", { class: "node-row status-" + status, "data-node": n.name }, [
          el("td", { class: "lvl", text: n.name + (n.head ? " (head)" : "") }),
          el("td", { class: status === "complete" ? "ok" : "bad", title: n.reason || "",
            text: status + (n.reason ? ": " + n.reason : "") }),
          el("td", { class: "n", text: Number.isInteger(n.num_cpus) ? String(n.num_cpus) :
            num(n.num_cpus) }),
          el("td", { class: "n", text: n.cpu_mean_pct === null ? "–" : num(n.cpu_mean_pct) + " % (" +
            num(n.cpu_mean_cores) + " cores)" }),
          el("td", { class: "n", text: n.cpu_peak_pct === null ? "–" : num(n.cpu_peak_pct) + " %" }),
          el("td", { class: "n", text: num(n.memory_peak_gib, "GiB") }),
          el("td", { class: "n", text: num(n.memory_limit_gib, "GiB") }),
          el("td", { class: "n", text: bytes(n.read_bytes) }),
          el("td", { class: "n", text: bytes(n.written_bytes) }),
          el("td", { class: "n", text: n.num_gpus ? n.num_gpus + (n.gpu_util_mean !== null ?
            " (" + num(n.gpu_util_mean) + " %)" : "") : "–" }),
          el("td", { class: "n", text: n.clock_offset_s === null || n.clock_offset_s === undefined ?
            "–" : (n.clock_offset_s >= 0 ? "+" : "") + (n.clock_offset_s * 1000).toFixed(1) + " ms" }),
          el("td", { class: "n", text: String(n.rows) }),
          el("td", null, (n.tags || []).map(function (t) {
            return el("span", { class: "tag tag-" + t, text: t }); })),
        ]));
      });
      nt.appendChild(ntb);
      app.appendChild(el("section", { class: "card" }, [
        el("h2", { text: "Nodes (" + nodes.length + ", " + (summary.node_level || "") +
          " level; job " + ((meta.multinode || {}).job || "–") + ")" }), nt]));
    }

    // ---- the run's processes: which of them used what (summary.processes) --------------------
    var procs = summary.processes;
    if (procs && procs.processes && procs.processes.length) {
      var pt = el("table", { class: "summary processes" });
      pt.appendChild(el("thead", null, [el("tr", null, ["PID", "CPU time", "Memory peak",
        "Read", "Written", "Seen", "Command"].map(function (h) { return el("th", { text: h }); }))]));
      var pb = el("tbody");
      procs.processes.forEach(function (p) {
        pb.appendChild(el("tr", null, [el("td", { class: "n", text: String(p.pid) }),
          el("td", { class: "n", text: num(p.cpu_s, "s") }),
          el("td", { class: "n", text: num(p.memory_peak_gib, "GiB") }),
          el("td", { class: "n", text: bytes(p.read_bytes) }),
          el("td", { class: "n", text: bytes(p.written_bytes) }),
          el("td", { class: "n", text: duration(p.first_s) + " – " + duration(p.last_s) }),
          el("td", null, [el("code", { text: p.command.length > 160 ?
            p.command.slice(0, 157) + "..." : p.command })])]));
      });
      if (procs.others)
        pb.appendChild(el("tr", { class: "others" }, [
          el("td", { class: "n", text: procs.others.count + " more" }),
          el("td", { class: "n", text: num(procs.others.cpu_s, "s") }),
          el("td", { class: "n", text: "≤ " + num(procs.others.memory_peak_gib, "GiB") }),
          el("td", { class: "n", text: bytes(procs.others.read_bytes) }),
          el("td", { class: "n", text: bytes(procs.others.written_bytes) }),
          el("td"), el("td")]));
      pt.appendChild(pb);
      app.appendChild(el("section", { class: "card" }, [el("h2", { text: "Processes (" +
        procs.count + " seen, by CPU time; memory counts shared pages once)" }), pt]));
    }

    // ---- the program's phases (its marks: `sonde mark`, sonde.mark(), sonde_mark()) -----------
    // On the charts' time axis: seconds since the run's start.
    var phases = (summary.phases || []).map(function (p) {
      return { name: p.name, start: p.start_wallclock - meta.start_wallclock,
        end: p.end_wallclock - meta.start_wallclock, p: p };
    });
    if (phases.length) {
      var ht = el("table", { class: "summary phases" });
      ht.appendChild(el("thead", null, [el("tr", null, ["Phase", "From", "Duration", "CPU time",
        "Cores", "Memory peak", "Read", "Written", "GPU"].map(function (h) {
        return el("th", { text: h }); }))]));
      var hb = el("tbody");
      phases.forEach(function (h, i) {
        var p = h.p;
        hb.appendChild(el("tr", null, [
          el("td", null, [el("span", { class: "swatch", style: "background:" +
            PHASE_COLORS[i % PHASE_COLORS.length].replace("0.10)", "0.45)") }), el("code", { text: p.name })]),
          el("td", { class: "n", text: "+" + duration(h.start) }),
          el("td", { class: "n", text: duration(p.duration_s) }),
          el("td", { class: "n", text: num(p.cpu_s, "s") }),
          el("td", { class: "n", text: num(p.cpu_mean_cores) }),
          el("td", { class: "n", text: num(p.memory_peak_gib, "GiB") }),
          el("td", { class: "n", text: bytes(p.io_read_bytes) }),
          el("td", { class: "n", text: bytes(p.io_write_bytes) }),
          el("td", { class: "n", text: num(p.gpu_util_mean, "%") })]));
      });
      ht.appendChild(hb);
      app.appendChild(el("section", { class: "card" }, [el("h2", { text: "Phases (" +
        phases.length + ", from the program's marks)" }), ht]));
    }

    if (data.cells && data.cells.length) {
      var ct = el("table", { class: "summary cells" });
      ct.appendChild(el("thead", null, [el("tr", null, ["Cell", "Start", "Duration", "Code"].map(
        function (h) { return el("th", { text: h }); }))]));
      var cb = el("tbody");
      data.cells.forEach(function (c) {
        cb.appendChild(el("tr", null, [el("td", { class: "n", text: "[" + c.index + "]" }),
          el("td", { class: "n", text: "+" + duration(c.start) }),
          el("td", { class: "n", text: duration(c.end - c.start) }),
          el("td", null, [el("code", { text: c.code.length > 160 ? c.code.slice(0, 157) + "..." :
            c.code })])]));
      });
      ct.appendChild(cb);
      app.appendChild(el("section", { class: "card" }, [el("h2", { text: "Notebook cells" }), ct]));
    }

    // ---- node selector (multi-node runs): switches every chart -------------------------------
    var currentNode = "", shown = data.levels;
    var nodeBar = null;
    if (nodes.length) {
      nodeBar = el("div", { class: "bar", id: "node-bar", role: "tablist" });
      nodeBar.appendChild(el("span", { class: "bar-label", text: "Node" }));
      [""].concat(nodes.map(function (n) { return n.name; })).forEach(function (name, i) {
        var b = el("button", { class: "node-btn", id: "node-" + i, "data-node": name, role: "tab",
          text: name === "" ? "Aggregate" : name,
          title: name === "" ? "all nodes (sums; CPU over all the job's CPUs)" : "node " + name });
        b.addEventListener("click", function () { setNode(name); });
        nodeBar.appendChild(b);
      });
      app.appendChild(nodeBar);
    }

    // ---- level selector and charts -----------------------------------------------------------
    var bar = el("div", { class: "bar", id: "level-bar", role: "tablist" });
    bar.appendChild(el("span", { class: "bar-label", text: "Level" }));
    levelNames.forEach(function (l) {
      var b = el("button", { class: "level-btn", id: "level-" + l, "data-level": l, role: "tab",
        title: LEVEL_TITLES[l] || l, text: l });
      b.addEventListener("click", function () { setLevel(l); });
      bar.appendChild(b);
    });
    var reset = el("button", { class: "reset-btn", id: "reset-zoom", text: "Reset zoom" });
    reset.addEventListener("click", function () { resetZoom(); });
    bar.appendChild(el("span", { class: "bar-hint",
      text: "drag across a chart to zoom all charts · double-click to reset" }));
    bar.appendChild(reset);
    app.appendChild(bar);
    var chartsBox = el("div", { id: "charts" });
    app.appendChild(chartsBox);
    app.appendChild(el("footer", { text: "sonde " + (meta.sonde_version || "") + " · " + meta.source +
      " · charts drawn with uPlot" }));

    var plots = [], current = null, syncing = false, fullRange = null;

    function resolveBound(b, limits) {
      if (b === null || b === undefined) return null;
      if (typeof b === "number") return b;
      var v = limits[b];
      return v === null || v === undefined ? null : v;
    }
    // Time since the start of the run: "45 s", "12:30", "1:02:03".
  var TIME_INCRS = [0.01, 0.02, 0.05, 0.1, 0.2, 0.25, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600,
    900, 1800, 3600, 7200, 3 * 3600, 6 * 3600, 12 * 3600, 86400];
  function elapsed(v, precise) {
    if (v === null || !isFinite(v)) return "–";
    var neg = v < 0 ? "-" : "";
    v = Math.abs(v);
    if (v < 60 && !precise) return neg + (Math.round(v * 100) / 100) + " s";
    if (v < 60) return neg + v.toFixed(v < 10 ? 2 : 1) + " s";
    var h = Math.floor(v / 3600), m = Math.floor((v % 3600) / 60), s = v % 60;
    var ss = precise ? s.toFixed(1) : String(Math.round(s));
    if (ss.indexOf(".") === 1 || ss.length === 1) ss = "0" + ss;
    var mm = h && m < 10 ? "0" + m : String(m);
    return neg + (h ? h + ":" : "") + mm + ":" + ss;
  }
  function fmtAxis(v) {
      if (v === null) return "";
      var a = Math.abs(v);
      if (a >= 1e9) return (v / 1e9).toFixed(1) + "G";
      if (a >= 1e6) return (v / 1e6).toFixed(1) + "M";
      if (a >= 1e4) return (v / 1e3).toFixed(0) + "k";
      if (a >= 10 || a === 0) return v.toFixed(0);
      if (a >= 1) return v.toFixed(1);
      return v.toPrecision(2);
    }

    function seriesColor(chart, i, n) {
      if (chart.type === "summary_series") return ["#60a5fa", "#1d4ed8", "#60a5fa"][i] || PALETTE[i];
      if (n > PALETTE.length) {
        var h = Math.round(360 * i / n);
        return "hsl(" + h + ",65%,45%)";
      }
      return PALETTE[i % PALETTE.length];
    }

    // Bands {start, end} on a chart's time axis, each filled with fill(band, i) and labelled
    // label(band) at the top or the bottom when it is wide enough.
    function drawBands(u, bands, fill, label, ink, atTop) {
      if (!bands.length) return;
      var ctx = u.ctx, top = u.bbox.top, h = u.bbox.height, px = devicePixelRatio;
      ctx.save();
      ctx.font = 10 * px + "px sans-serif";
      ctx.textAlign = "left";
      ctx.textBaseline = atTop ? "top" : "bottom";
      bands.forEach(function (band, i) {
        var a = Math.max(u.valToPos(band.start, "x", true), u.bbox.left);
        var b = Math.min(u.valToPos(band.end, "x", true), u.bbox.left + u.bbox.width);
        if (!(b > a)) return;
        ctx.fillStyle = fill(band, i);
        ctx.fillRect(a, top, b - a, h);
        if (b - a > 18 * px) {
          ctx.fillStyle = ink;
          ctx.fillText(label(band), a + 3 * px, atTop ? top + 2 * px : top + h - 2 * px,
            b - a - 6 * px);
        }
      });
      ctx.restore();
    }

    function makeChart(level, chart, x, width) {
      var scale = chart.scale || 1;
      var ys = chart.series.map(function (s) {
        var col = level.cols[s.column] || [];
        if (scale === 1) return col;
        return col.map(function (v) { return v === null ? null : v * scale; });
      });
      var any = ys.some(function (y) { return y.some(function (v) { return v !== null; }); });
      var card = el("div", { class: "chart", "data-chart": chart.name });
      var unit = chart.unit ? " (" + chart.unit + ")" : "";
      card.appendChild(el("h3", { text: chart.title + unit }));
      if (!any || x.length < 2) {
        card.classList.add("empty");
        card.appendChild(el("p", { class: "note", text: x.length < 2 ?
          "fewer than two samples at this level" : "no measured values at this level" }));
        return { card: card, plot: null, chart: chart };
      }
      var limit = resolveBound(chart.limit, level.limits);
      var lo = resolveBound(chart.ylim[0], level.limits), hi = resolveBound(chart.ylim[1], level.limits);
      var n = ys.length;
      var series = [{ label: "time", value: function (u, v) { return v === null ? "–" : elapsed(v, true); } }];
      chart.series.forEach(function (s, i) {
        var summaryMid = chart.type === "summary_series" && s.label === "mean";
        series.push({
          label: s.label, stroke: seriesColor(chart, i, n),
          width: summaryMid ? 2 : n > 8 ? 1 : 1.5,
          dash: chart.type === "summary_series" && !summaryMid ? [4, 3] : undefined,
          points: { show: false }, spanGaps: false,
          value: function (u, v) { return v === null ? "–" : num(v); },
        });
      });
      var bands = [];
      if (chart.type === "summary_series" && n === 3) {
        bands.push({ series: [3, 1], fill: "rgba(37,99,235,0.10)" });
      }
      var opts = {
        width: width, height: 210,
        series: series, bands: bands,
        legend: { show: n <= 16, live: true },
        cursor: { sync: { key: "sonde" }, drag: { x: true, y: false, setScale: true } },
        scales: {
          x: { time: false },
          y: {
            range: function (u, mn, mx) {
              var a = lo !== null ? lo : Math.min(0, mn === null ? 0 : mn);
              var b = hi !== null ? Math.max(hi, mx === null ? hi : mx) : mx;
              if (limit !== null && (b === null || limit > b) && limit < 4 * (mx || 1)) b = limit;
              if (b === null || b <= a) b = a + 1;
              return [a, b * (hi !== null && b === hi ? 1 : 1.05)];
            },
          },
        },
        axes: [
          { stroke: "#475569", grid: { stroke: "#e2e8f0", width: 1 }, ticks: { stroke: "#cbd5e1" },
          incrs: TIME_INCRS, values: function (u, vals) { return vals.map(function (v) { return elapsed(v, false); }); } },
          { stroke: "#475569", size: 56, grid: { stroke: "#e2e8f0", width: 1 },
            ticks: { stroke: "#cbd5e1" },
            values: function (u, vals) { return vals.map(fmtAxis); } },
        ],
        hooks: {
          // Behind the data: a named band per phase of the program (its marks) at the top, and
          // a light band per notebook cell (Jupyter sessions) at the bottom.
          drawClear: [function (u) {
            drawBands(u, phases, function (p, i) { return PHASE_COLORS[i % PHASE_COLORS.length]; },
              function (p) { return p.name; }, "#374151", true);
            drawBands(u, data.cells || [], function (c, i) {
              return i % 2 ? "rgba(217,119,6,0.08)" : "rgba(124,58,237,0.08)";
            }, function (c) { return "[" + c.index + "]"; }, "#6d28d9", false);
          }],
          setScale: [function (u, key) {
            if (key !== "x" || syncing) return;
            syncing = true;
            var mn = u.scales.x.min, mx = u.scales.x.max;
            plots.forEach(function (p) {
              if (p.plot && p.plot !== u) p.plot.setScale("x", { min: mn, max: mx });
            });
            syncing = false;
          }],
          draw: [function (u) {
            if (limit === null) return;
            var yv = u.valToPos(limit, "y", true);
            var ctx = u.ctx;
            if (yv < u.bbox.top - 1 || yv > u.bbox.top + u.bbox.height + 1) {
              // Off the scale: say where it is rather than flatten the data against it.
              ctx.save();
              ctx.fillStyle = "#b91c1c";
              ctx.font = 11 * devicePixelRatio + "px sans-serif";
              ctx.textAlign = "right";
              ctx.textBaseline = "alphabetic";
              ctx.fillText("limit " + num(limit) + (chart.unit ? " " + chart.unit : "") +
                (yv < u.bbox.top ? " ↑" : " ↓"), u.bbox.left + u.bbox.width - 4 * devicePixelRatio,
                u.bbox.top + 12 * devicePixelRatio);
              ctx.restore();
              return;
            }
            ctx.save();
            ctx.strokeStyle = "#b91c1c";
            ctx.lineWidth = 1.5 * devicePixelRatio;
            ctx.setLineDash([6 * devicePixelRatio, 4 * devicePixelRatio]);
            ctx.beginPath();
            ctx.moveTo(u.bbox.left, yv);
            ctx.lineTo(u.bbox.left + u.bbox.width, yv);
            ctx.stroke();
            // The label beside the line, never on it: above it where there is room in the plot,
            // else below it, on a light background so that the data under it stays readable.
            var px = devicePixelRatio, text = "limit " + num(limit) + (chart.unit ? " " + chart.unit : "");
            ctx.setLineDash([]);
            ctx.font = 11 * px + "px sans-serif";
            ctx.textAlign = "left";
            var above = yv - 18 * px >= u.bbox.top;
            ctx.textBaseline = above ? "bottom" : "top";
            var ty = above ? yv - 4 * px : yv + 4 * px, tw = ctx.measureText(text).width;
            ctx.fillStyle = "rgba(255,255,255,0.85)";
            ctx.fillRect(u.bbox.left + 4 * px, above ? ty - 13 * px : ty - 1 * px, tw + 4 * px, 14 * px);
            ctx.fillStyle = "#b91c1c";
            ctx.fillText(text, u.bbox.left + 6 * px, ty);
            ctx.restore();
          }],
        },
      };
      var holder = el("div", { class: "plot" });
      card.appendChild(holder);
      var plot = new uPlot(opts, [x].concat(ys), holder);
      return { card: card, plot: plot, chart: chart, ys: ys };
    }

    function chartWidth() {
      var w = chartsBox.clientWidth || 1000;
      var cols = w >= 1100 ? 2 : 1;
      return Math.floor((w - (cols - 1) * 16) / cols) - 26;
    }

    // Which node's levels the charts draw ("" = the aggregate); keeps the level where the node
    // has it.
    function setNode(name) {
      var levels = null;
      if (name === "") levels = data.levels;
      nodes.forEach(function (n) { if (n.name === name) levels = n.levels; });
      if (!levels) throw new Error("no node " + name);
      currentNode = name;
      shown = levels;
      Array.prototype.forEach.call(nodeBar.querySelectorAll(".node-btn"), function (b) {
        b.classList.toggle("active", b.getAttribute("data-node") === name);
        b.setAttribute("aria-selected", b.getAttribute("data-node") === name ? "true" : "false");
      });
      var names = levels.map(function (l) { return l.level; });
      Array.prototype.forEach.call(bar.querySelectorAll(".level-btn"), function (b) {
        b.disabled = names.indexOf(b.getAttribute("data-level")) < 0;
      });
      var next = names.indexOf(current) >= 0 ? current : names[0];
      if (next) setLevel(next);
      else {
        plots.forEach(function (p) { if (p.plot) p.plot.destroy(); });
        plots = [];
        chartsBox.textContent = "";
        chartsBox.appendChild(el("p", { class: "note", text: "no rows from this node" }));
      }
    }

    function setLevel(name) {
      var level = null;
      shown.forEach(function (l) { if (l.level === name) level = l; });
      if (!level) throw new Error("no level " + name + (currentNode ? " on node " + currentNode : ""));
      plots.forEach(function (p) { if (p.plot) p.plot.destroy(); });
      plots = [];
      chartsBox.textContent = "";
      current = name;
      Array.prototype.forEach.call(bar.querySelectorAll(".level-btn"), function (b) {
        b.classList.toggle("active", b.getAttribute("data-level") === name);
        b.setAttribute("aria-selected", b.getAttribute("data-level") === name ? "true" : "false");
      });
      var x = level.t;
      fullRange = x.length ? [x[0], x[x.length - 1]] : null;
      var width = chartWidth();
      var section = null, grid = null;
      level.charts.forEach(function (c) {
        var s = c.section || "Other";
        if (s !== section) {
          section = s;
          grid = el("div", { class: "grid" });
          chartsBox.appendChild(el("section", { class: "card charts-section" }, [
            el("h2", { text: s + " · " + name + " level" + (nodes.length ? " · " +
              (currentNode === "" ? "aggregate of " + nodes.length + " nodes" : "node " +
                currentNode) : "") }), grid]));
        }
        var p = makeChart(level, c, x, width);
        grid.appendChild(p.card);
        plots.push(p);
      });
      if (!level.charts.length)
        chartsBox.appendChild(el("p", { class: "note", text: "no columns at this level" }));
    }

    function resetZoom() {
      if (!fullRange) return;
      plots.forEach(function (p) {
        if (p.plot) p.plot.setScale("x", { min: fullRange[0], max: fullRange[1] });
      });
    }
    chartsBox.addEventListener("dblclick", function () { resetZoom(); });

    var resizeTimer = null;
    window.addEventListener("resize", function () {
      clearTimeout(resizeTimer);
      resizeTimer = setTimeout(function () {
        var w = chartWidth();
        plots.forEach(function (p) { if (p.plot) p.plot.setSize({ width: w, height: 210 }); });
      }, 100);
    });

    // The aggregate opens on the job's level (slurm) when there is one: the process level of a
    // multi-node run is the head's command only.
    var initial = nodes.length && levelNames.indexOf("slurm") >= 0 ? "slurm" :
      levelNames.indexOf("process") >= 0 ? "process" : levelNames[0];
    if (nodes.length) setNode("");
    if (initial) setLevel(initial);

    // What the browser test reads: the drawn charts and their data at the current level.
    window.sondeReport = {
      errors: errors,
      levels: levelNames,
      level: function () { return current; },
      setLevel: setLevel,
      nodes: nodes.map(function (n) { return n.name; }),
      node: function () { return currentNode; },
      setNode: setNode,
      resetZoom: resetZoom,
      charts: function () {
        return plots.map(function (p) {
          var sum = 0, points = 0;
          (p.ys || []).forEach(function (y) {
            y.forEach(function (v) { if (v !== null) { sum += v; points++; } });
          });
          return { name: p.chart.name, title: p.chart.title, drawn: !!p.plot, points: points,
            sum: sum, series: p.chart.series.length };
        });
      },
      xRange: function () {
        var p = plots.filter(function (q) { return q.plot; })[0];
        return p ? [p.plot.scales.x.min, p.plot.scales.x.max] : null;
      },
      xRanges: function () {
        return plots.filter(function (q) { return q.plot; }).map(function (q) {
          return [q.plot.scales.x.min, q.plot.scales.x.max];
        });
      },
      ready: true,
    };
  }
})();
