// aichor-iac dashboard: what changes is fetched again and swapped in, never reloaded. The
// fragments are HTML the server's templates escaped; everything else (log lines, chart labels)
// reaches the page as textContent or canvas text. No inline script: the CSP forbids it.
"use strict";

(() => {
  const EVERY = 2000; // ms between reads, as the server reads the cluster
  const KEPT_LINES = 5000; // a followed log's lines kept on the page
  const KEPT_POINTS = 1800; // a metric's points kept (an hour of reports every 2 s)

  const get = (url) => fetch(url, { credentials: "same-origin", cache: "no-store" });
  const repeat = (work, ms) => {
    const tick = async () => {
      let again = true;
      try {
        again = (await work()) !== false;
      } catch (error) {
        // the dashboard went away or is busy: try again
      }
      if (again) setTimeout(tick, ms);
    };
    tick();
  };

  // --- the part of the page that changes: #live, from its fragment ---
  const sorting = { column: null, direction: "ascending" };

  function focusKey(element) {
    if (!element || element === document.body) return null;
    return element.getAttribute("href") || element.dataset.column || null;
  }

  function refocus(box, key) {
    if (key === null) return;
    for (const element of box.querySelectorAll("a[href], button[data-column]")) {
      if (focusKey(element) === key) {
        element.focus();
        return;
      }
    }
  }

  function live() {
    const box = document.getElementById("live");
    if (!box) return;
    let last = null;
    setTimeout(
      () =>
        repeat(async () => {
          const answer = await get(box.dataset.fragment);
          const text = await answer.text();
          if (text === last) return;
          last = text;
          const key = box.contains(document.activeElement) ? focusKey(document.activeElement) : null;
          box.innerHTML = text; // (escaped by the server's templates)
          sortAgain();
          refocus(box, key);
        }, EVERY),
      EVERY,
    );
  }

  // --- a sortable table: each header's button sorts by its column, again on a second press ---
  function cellValue(row) {
    const cell = row.cells[sorting.column];
    if (!cell) return "";
    return cell.dataset.value !== undefined ? cell.dataset.value : cell.textContent.trim();
  }

  function sortAgain() {
    const table = document.querySelector("table.sortable");
    if (!table || sorting.column === null) return;
    const body = table.tBodies[0];
    const rows = Array.from(body.rows);
    const numeric = rows.every((r) => cellValue(r) === "" || !Number.isNaN(Number(cellValue(r))));
    const sign = sorting.direction === "ascending" ? 1 : -1;
    rows.sort((a, b) => {
      const x = cellValue(a);
      const y = cellValue(b);
      if (x === "" || y === "") return (x === "") - (y === ""); // (empty last, either way)
      const c = numeric ? Number(x) - Number(y) : x.localeCompare(y, undefined, { numeric: true });
      return sign * c;
    });
    body.append(...rows);
    table.querySelectorAll("thead th").forEach((th, i) => {
      th.setAttribute("aria-sort", i === sorting.column ? sorting.direction : "none");
    });
  }

  document.addEventListener("click", (event) => {
    const button = event.target.closest("button[data-column]");
    if (!button) return;
    const column = Number(button.dataset.column);
    const again = sorting.column === column && sorting.direction === "ascending";
    sorting.column = column;
    sorting.direction = again ? "descending" : "ascending";
    sortAgain();
  });

  // --- a pod's log, followed: each line as text ---
  function logs() {
    const out = document.getElementById("log");
    if (!out) return;
    const said = document.getElementById("log-state");
    let seen = 0;
    let run = null; // (where its lines are read: another run of it is followed from its start)
    repeat(async () => {
      const found = await (await get(`${out.dataset.source}?after=${seen}`)).json();
      const from = `${found.run} ${found.pod}`; // (another run, or the first pod it has)
      if (run !== null && from !== run) {
        out.replaceChildren();
        seen = 0;
        run = from;
        if (found.pod) document.getElementById("log-pod").textContent = found.pod;
        return true;
      }
      run = from;
      const atEnd = out.scrollTop + out.clientHeight >= out.scrollHeight - 8;
      for (const [number, when, text] of found.lines) {
        const line = document.createElement("span");
        line.textContent = text;
        line.title = when;
        out.append(line);
        seen = number;
      }
      while (out.childElementCount > KEPT_LINES) out.firstElementChild.remove();
      if (atEnd) out.scrollTop = out.scrollHeight;
      said.textContent = found.error || (found.ended ? "The container has ended." : "Following…");
      return true; // (an ended log is asked again: a run of it again is followed)
    }, 1000);
  }

  // --- the objects, fetched when first opened ---
  function objects() {
    const details = document.getElementById("objects");
    if (!details) return;
    details.addEventListener("toggle", async () => {
      const out = document.getElementById("objects-text");
      if (!details.open || out.textContent) return;
      out.textContent = "Rendering…";
      out.textContent = await (await get(details.dataset.source)).text();
    });
  }

  // --- charts (Chart.js, served from the package) ---
  const palette = ["#0b62c4", "#c62828", "#1a7f37", "#8a6d00", "#6f42c1", "#d4570b", "#0a8a8a"];

  function metrics() {
    const canvas = document.getElementById("metrics-chart");
    if (!canvas || !window.Chart) return;
    const chart = new Chart(canvas, {
      type: "line",
      data: { datasets: [] },
      options: {
        animation: false,
        maintainAspectRatio: false,
        parsing: false,
        scales: { x: { type: "linear", title: { display: true, text: "step (the n-th value reported)" } } },
      },
    });
    let last = null;
    repeat(async () => {
      const found = await (await get(canvas.dataset.source)).json();
      const series = Object.entries(found.metrics || {});
      const seen = JSON.stringify(series.map(([name, points]) => [name, points.length, points.at(-1)]));
      if (!series.length || seen === last) return;
      last = seen;
      chart.data.datasets = series.map(([name, points], i) => {
        const color = palette[i % palette.length];
        const data = points.slice(-KEPT_POINTS).map(([step, , value]) => ({ x: step, y: value }));
        return { label: name, data, borderColor: color, backgroundColor: color };
      });
      chart.update();
      document.getElementById("metrics-none").hidden = true;
      canvas.dataset.points = String(chart.data.datasets.reduce((n, d) => n + d.data.length, 0));
    }, EVERY);
  }

  // A parameter's values as numbers: its own, else each choice's place among the choices.
  function axis(trials, read) {
    const values = trials.map(read);
    if (values.every((v) => v === null || v === "" || Number.isFinite(Number(v)))) {
      return { numbers: values.map((v) => (v === null || v === "" ? null : Number(v))), choices: null };
    }
    const choices = [...new Set(values.filter((v) => v !== null))].sort();
    return { numbers: values.map((v) => (v === null ? null : choices.indexOf(v))), choices };
  }

  function sweepCharts() {
    const pcp = document.getElementById("pcp");
    const scatters = document.getElementById("scatters");
    if (!pcp || !window.Chart) return;
    let parallel = null;
    const each = new Map();
    let last = null;
    repeat(async () => {
      const found = await (await get(pcp.dataset.source)).json();
      const text = JSON.stringify(found);
      if (text === last) return;
      last = text;
      const trials = found.trials.filter((t) => t.objective !== null);
      const names = [...new Set(found.trials.flatMap((t) => Object.keys(t.parameters)))];
      const columns = names.map((n) => ({ label: n, ...axis(trials, (t) => t.parameters[n] ?? null) }));
      const objective = axis(trials, (t) => t.objective);
      const lineColor = (c) => (trials[c.dataIndex] && trials[c.dataIndex].trial === found.best ? "#c62828" : "#0b62c488");
      const data = {
        labels: trials.map((t) => t.trial),
        datasets: [...columns, { label: found.objective, ...objective }].map((c) => ({
          label: c.choices ? `${c.label} (${c.choices.map((v, i) => `${i}: ${v}`).join(", ")})` : c.label,
          data: c.numbers,
        })),
      };
      if (window.ChartPCP && columns.length) {
        if (parallel) parallel.destroy();
        parallel = new ChartPCP.ParallelCoordinatesChart(pcp, {
          data,
          options: {
            animation: false,
            maintainAspectRatio: false,
            elements: { lineSegment: { borderColor: lineColor, borderWidth: (c) => (lineColor(c) === "#c62828" ? 3 : 1) } },
            plugins: { legend: { display: false } },
          },
        });
      }
      for (const column of columns) {
        let chart = each.get(column.label);
        if (!chart) {
          const figure = document.createElement("figure");
          const box = document.createElement("div");
          const canvas = document.createElement("canvas");
          const caption = document.createElement("figcaption");
          box.className = "chart";
          caption.textContent = `${found.objective} against ${column.label}`;
          canvas.setAttribute("role", "img");
          canvas.setAttribute("aria-label", caption.textContent);
          box.append(canvas);
          figure.append(box, caption);
          scatters.append(figure);
          chart = new Chart(canvas, {
            type: "scatter",
            data: { datasets: [{ label: found.objective, data: [] }] },
            options: {
              animation: false,
              maintainAspectRatio: false,
              plugins: { legend: { display: false } },
              scales: { x: { title: { display: true, text: column.label } }, y: { title: { display: true, text: found.objective } } },
            },
          });
          each.set(column.label, chart);
        }
        const points = trials.map((t, i) => ({ x: column.numbers[i], y: t.objective, trial: t.trial }));
        const set = chart.data.datasets[0];
        set.data = points.filter((p) => p.x !== null);
        set.pointBackgroundColor = set.data.map((p) => (p.trial === found.best ? "#c62828" : "#0b62c4"));
        set.pointRadius = set.data.map((p) => (p.trial === found.best ? 6 : 3));
        if (column.choices) {
          chart.options.scales.x.ticks = { stepSize: 1, callback: (v) => column.choices[v] ?? "" };
        }
        chart.update();
      }
    }, EVERY);
  }

  document.addEventListener("DOMContentLoaded", () => {
    live();
    logs();
    objects();
    metrics();
    sweepCharts();
  });
})();
