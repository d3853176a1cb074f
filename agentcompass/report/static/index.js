// The attempts table of index.html: sorted, filtered and paginated here, from data/attempts.js
// (loaded by a <script> tag: browsers refuse fetch() of file:// pages). Only one page of rows is
// ever in the document, so a run of 10,000 attempts opens as fast as one of ten. Every value is
// put in with textContent: an answer or an error holding HTML is shown as text. A scanned run's
// table has a "flagged" column (the transcript scanners that flagged each attempt) and a filter of
// its own; a run that was not scanned has neither.
(function () {
  "use strict";
  var PAGE = 50;
  var COLUMNS = [
    {key: "task_id", label: "task", type: "text"},
    {key: "attempt", label: "attempt", type: "number"},
    {key: "category", label: "category", type: "text"},
    {key: "status", label: "status", type: "text"},
    {key: "score", label: "score", type: "number"},
    {key: "correct", label: "correct", type: "bool"},
    {key: "calls", label: "calls", type: "number"},
    {key: "tokens", label: "tokens", type: "number"},
    {key: "cost_usd", label: "cost", type: "number"},
    {key: "latency_seconds", label: "model s", type: "number"},
    {key: "seconds", label: "wall s", type: "number"},
    {key: "error", label: "error", type: "text"}
  ];
  var table = document.getElementById("attempts");
  var data = window.AC_ATTEMPTS;
  if (!table) { return; }
  if (!data) {
    document.getElementById("attempts-info").textContent =
      "data/attempts.js is missing beside this page: rebuild the report (agentcompass report RUN_DIR).";
    return;
  }
  var index = {};
  data.columns.forEach(function (name, i) { index[name] = i; });
  var rows = data.rows;
  var state = {sort: null, descending: false, filter: "", status: "", flag: "", page: 0, shown: rows};

  function value(row, key) { return row[index[key]]; }

  // the scanners that flagged an attempt (its "flagged" value: their ids joined by ";", "" for none, null when
  // it was not scanned)
  function flags(row) {
    var v = value(row, "flagged");
    return (v === null || v === undefined || v === "") ? [] : String(v).split(";");
  }
  var scanned = index.flagged !== undefined && rows.some(function (row) {
    var v = value(row, "flagged");
    return v !== null && v !== undefined;
  });
  if (scanned) {
    COLUMNS.splice(6, 0, {key: "flagged", label: "flagged", type: "text"});
  }

  // the flag filter: "" every attempt, "*" those flagged, "-" those scanned and not flagged, "=ID" flagged by ID
  function flagMatches(row) {
    var f = state.flag;
    if (!f) { return true; }
    var ids = flags(row);
    if (f === "*") { return ids.length > 0; }
    if (f === "-") { return ids.length === 0 && value(row, "flagged") !== null; }
    return ids.indexOf(f.slice(1)) !== -1;
  }

  function compare(key, type) {
    return function (a, b) {
      var x = value(a, key), y = value(b, key);
      // no value sorts last, whichever the direction
      if (x === null || x === undefined) { return (y === null || y === undefined) ? 0 : 1; }
      if (y === null || y === undefined) { return -1; }
      if (type === "text") { x = String(x); y = String(y); return x < y ? -1 : x > y ? 1 : 0; }
      return (x === y) ? 0 : (x < y ? -1 : 1);
    };
  }

  function apply() {
    var needle = state.filter.trim().toLowerCase();
    var status = state.status;
    var shown = rows.filter(function (row) {
      if (status && value(row, "status") !== status) { return false; }
      if (!flagMatches(row)) { return false; }
      if (!needle) { return true; }
      return ["task_id", "category", "status", "error", "kind", "flagged"].some(function (key) {
        var v = value(row, key);
        return v !== null && v !== undefined && String(v).toLowerCase().indexOf(needle) !== -1;
      });
    });
    if (state.sort) {
      var column = COLUMNS.filter(function (c) { return c.key === state.sort; })[0];
      var order = compare(column.key, column.type);
      // a stable sort with the direction applied to values only: missing values stay last
      shown = shown.map(function (row, i) { return [row, i]; });
      shown.sort(function (a, b) {
        var c = order(a[0], b[0]);
        var missing = value(a[0], column.key) === null || value(b[0], column.key) === null;
        if (state.descending && !missing) { c = -c; }
        return c || a[1] - b[1];
      });
      shown = shown.map(function (pair) { return pair[0]; });
    }
    state.shown = shown;
    var pages = Math.max(1, Math.ceil(shown.length / PAGE));
    if (state.page >= pages) { state.page = pages - 1; }
    render();
  }

  function cell(tr, text, className) {
    var td = document.createElement("td");
    if (className) { td.className = className; }
    td.textContent = text;
    tr.appendChild(td);
    return td;
  }

  function number(v, digits) {
    if (v === null || v === undefined) { return ""; }
    return digits === undefined ? String(v) : Number(v).toFixed(digits);
  }

  function render() {
    var body = table.tBodies[0];
    var fragment = document.createDocumentFragment();
    var start = state.page * PAGE;
    state.shown.slice(start, start + PAGE).forEach(function (row) {
      var tr = document.createElement("tr");
      var td = cell(tr, "");
      var page = value(row, "page");
      if (page) {
        var a = document.createElement("a");
        var slash = page.lastIndexOf("/");
        a.href = "attempt.html#" + encodeURIComponent(page.slice(0, slash)) + "/" + page.slice(slash + 1);
        a.textContent = value(row, "task_id");
        td.appendChild(a);
      } else {
        td.textContent = value(row, "task_id");
      }
      cell(tr, number(value(row, "attempt")), "num");
      cell(tr, value(row, "category") === null ? "" : value(row, "category"));
      var status = cell(tr, "");
      var badge = document.createElement("span");
      badge.className = "status " + value(row, "status");
      badge.textContent = value(row, "status");
      status.appendChild(badge);
      cell(tr, number(value(row, "score")), "num");
      var correct = value(row, "correct");
      cell(tr, correct === null ? "" : (correct ? "yes" : "no"), correct === null ? "" : (correct ? "good" : "bad"));
      if (scanned) { cell(tr, flags(row).join(", "), flags(row).length ? "flag" : ""); }
      cell(tr, number(value(row, "calls")), "num");
      cell(tr, number(value(row, "tokens")), "num");
      cell(tr, value(row, "cost"), "num");  // written as every view writes dollars (results.dollars)
      cell(tr, number(value(row, "latency_seconds"), 2), "num");
      cell(tr, number(value(row, "seconds"), 2), "num");
      var error = cell(tr, value(row, "error") || "", "error");
      error.title = value(row, "error") || "";
      fragment.appendChild(tr);
    });
    body.replaceChildren(fragment);
    var pages = Math.max(1, Math.ceil(state.shown.length / PAGE));
    document.getElementById("page-info").textContent =
      "page " + (state.page + 1) + " of " + pages;
    document.getElementById("attempts-info").textContent =
      state.shown.length + " of " + rows.length + " attempts";
    document.getElementById("previous").disabled = state.page === 0;
    document.getElementById("next").disabled = state.page >= pages - 1;
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th) {
      if (th.dataset.key === state.sort) {
        th.setAttribute("aria-sort", state.descending ? "descending" : "ascending");
      } else {
        th.removeAttribute("aria-sort");
      }
    });
  }

  // header: one button per column; a click sorts by it, a second click reverses
  var head = table.tHead.rows[0];
  COLUMNS.forEach(function (column) {
    var th = document.createElement("th");
    th.dataset.key = column.key;
    if (column.type === "number") { th.className = "num"; }
    var button = document.createElement("button");
    button.type = "button";
    button.textContent = column.label;
    button.addEventListener("click", function () {
      if (state.sort === column.key) {
        state.descending = !state.descending;
      } else {
        state.sort = column.key;
        state.descending = false;
      }
      state.page = 0;
      apply();
    });
    th.appendChild(button);
    head.appendChild(th);
  });

  var statuses = {};
  rows.forEach(function (row) { statuses[value(row, "status")] = true; });
  var select = document.getElementById("status-filter");
  Object.keys(statuses).sort().forEach(function (s) {
    var option = document.createElement("option");
    option.value = s;
    option.textContent = s;
    select.appendChild(option);
  });
  select.addEventListener("change", function () { state.status = select.value; state.page = 0; apply(); });
  var flagSelect = null;
  if (scanned) {
    flagSelect = document.createElement("select");
    flagSelect.id = "flag-filter";
    flagSelect.setAttribute("aria-label", "flags");
    var choices = [["", "flagged or not"], ["*", "flagged"], ["-", "not flagged"]];
    var ids = {};
    rows.forEach(function (row) { flags(row).forEach(function (id) { ids[id] = true; }); });
    // and each scanner the Flagged attempts section names (one that flagged nothing too)
    Array.prototype.forEach.call(document.querySelectorAll("a[data-flag]"), function (a) { ids[a.dataset.flag] = true; });
    Object.keys(ids).sort().forEach(function (id) { choices.push(["=" + id, "flagged by " + id]); });
    choices.forEach(function (choice) {
      var option = document.createElement("option");
      option.value = choice[0];
      option.textContent = choice[1];
      flagSelect.appendChild(option);
    });
    select.after(flagSelect);
    flagSelect.addEventListener("change", function () { state.flag = flagSelect.value; state.page = 0; apply(); });
  }
  var filter = document.getElementById("filter");
  filter.addEventListener("input", function () { state.filter = filter.value; state.page = 0; apply(); });
  document.getElementById("previous").addEventListener("click", function () { state.page -= 1; render(); });
  document.getElementById("next").addEventListener("click", function () { state.page += 1; render(); });
  // "errors by kind": a kind's link filters the table to it
  Array.prototype.forEach.call(document.querySelectorAll("a[data-kind]"), function (a) {
    a.addEventListener("click", function (event) {
      event.preventDefault();
      filter.value = a.dataset.kind;
      state.filter = a.dataset.kind;
      state.status = "";
      select.value = "";
      state.page = 0;
      apply();
      table.scrollIntoView();
    });
  });
  // "flagged attempts": a scanner's link filters the table to the attempts it flagged
  Array.prototype.forEach.call(document.querySelectorAll("a[data-flag]"), function (a) {
    a.addEventListener("click", function (event) {
      event.preventDefault();
      if (!flagSelect) { return; }
      flagSelect.value = "=" + a.dataset.flag;
      state.flag = flagSelect.value;
      state.page = 0;
      apply();
      table.scrollIntoView();
    });
  });
  apply();
})();
