// attempt.html#<task segment>/<attempt>: one attempt, drawn from data/attempts/<segment>.<attempt>.js,
// loaded on demand by a <script> tag (fetch() of file:// pages is refused). Every value is put in
// with textContent: whatever the model, the task, a log or a scanner's evidence says is shown as text.
//
// attempt.html#<task segment>/<attempt>/step/<n>: the same attempt, scrolled to step n of its trajectory
// and that event highlighted. A step is the line of trajectory.jsonl the event is on, from 0 (the number a
// transcript scanner's evidence names: scan.json's evidence[].step); each event is anchored by it
// (id "step-<n>"), and a scanned attempt's events show it as a link. A step the trajectory does not show
// (not a whole number, past its end) is said in a note.
// The attempt's findings (its scan.json) are drawn at the top, each piece of evidence linked to its step.
(function () {
  "use strict";
  var root = document.getElementById("attempt");
  var STEP = /^(.*)\/step\/([^\/]*)$/;
  // the attempt drawn ("segment/attempt"), the one being loaded, its segment and attempt, and the step the URL names
  var drawn = null, loading = null, current = {segment: "", attempt: ""}, wanted = null;

  function el(tag, className, text) {
    var node = document.createElement(tag);
    if (className) { node.className = className; }
    if (text !== undefined && text !== null) { node.textContent = text; }
    return node;
  }

  function pretty(value) {
    return typeof value === "string" ? value : JSON.stringify(value, null, 2);
  }

  function pre(value) { return el("pre", null, pretty(value)); }

  function section(title, id) {
    var s = el("section");
    if (id) { s.id = id; }
    s.appendChild(el("h2", null, title));
    root.appendChild(s);
    return s;
  }

  function table(pairs) {
    var t = el("table", "kv");
    pairs.forEach(function (pair) {
      if (pair[1] === undefined) { return; }
      var tr = el("tr");
      tr.appendChild(el("th", null, pair[0]));
      var td = el("td");
      if (pair[1] instanceof Node) { td.appendChild(pair[1]); } else {
        td.textContent = pair[1] === null ? "" : (typeof pair[1] === "object" ? JSON.stringify(pair[1]) : String(pair[1]));
      }
      tr.appendChild(td);
      t.appendChild(tr);
    });
    return t;
  }

  // the whole record, drawn only when opened: a long trajectory would otherwise double the page
  function raw(value, label) {
    var d = el("details");
    d.appendChild(el("summary", null, label || "raw"));
    d.addEventListener("toggle", function () {
      if (d.open && d.childNodes.length === 1) { d.appendChild(pre(value)); }
    });
    return d;
  }

  function statusBadge(status) { return el("span", "status " + status, status); }

  function content(value) {
    if (value === null || value === undefined) { return ""; }
    if (typeof value === "string") { return value; }
    if (Array.isArray(value)) {
      return value.map(function (part) {
        return part && part.type === "text" ? part.text : JSON.stringify(part);
      }).join("\n");
    }
    return JSON.stringify(value, null, 2);
  }

  function args(value) {
    if (typeof value === "string") {
      try { return JSON.stringify(JSON.parse(value), null, 2); } catch (e) { return value; }
    }
    return JSON.stringify(value, null, 2);
  }

  function toolCalls(calls) {
    var box = el("div");
    (calls || []).forEach(function (call) {
      var f = call["function"] || call;
      var div = el("div", "call");
      div.appendChild(el("span", "muted", "calls "));
      div.appendChild(el("span", "name", f.name));
      if (call.id) { div.appendChild(el("span", "muted", " (" + call.id + ")")); }
      div.appendChild(el("pre", null, args(f.arguments)));
      box.appendChild(div);
    });
    return box;
  }

  function message(m) {
    var div = el("div", "message");
    div.appendChild(el("div", "role", (m.role || "message") + (m.tool_call_id ? " \u2190 " + m.tool_call_id : "")));
    var text = content(m.content);
    if (text) { div.appendChild(el("pre", null, text)); }
    if (m.tool_calls && m.tool_calls.length) { div.appendChild(toolCalls(m.tool_calls)); }
    return div;
  }

  function usage(u) {
    if (!u) { return ""; }
    return " \u00b7 tokens " + (u.prompt_tokens || 0) + " in, " + (u.completion_tokens || 0) + " out";
  }

  // a chat-completions exchange: the messages new since the last one, then the reply
  function exchange(box, request, reply, error, state) {
    var messages = (request && request.messages) || [];
    messages.slice(state.sent).forEach(function (m) {
      // the model's own replies are drawn as replies; tool outputs as the tool_result events, when there are any
      if (m.role === "assistant" && state.sent > 0) { return; }
      if (m.role === "tool" && state.toolEvents) { return; }
      box.appendChild(message(m));
    });
    state.sent = messages.length;
    if (error) { box.appendChild(el("pre", "bad", "error: " + error)); }
    var choice = reply && reply.choices && reply.choices[0];
    if (choice) {
      var m = choice.message || {};
      var div = el("div", "message");
      div.appendChild(el("div", "role", "reply" + (choice.finish_reason ? " (" + choice.finish_reason + ")" : "")));
      var text = content(m.content);
      if (text) { div.appendChild(el("pre", null, text)); }
      if (m.tool_calls && m.tool_calls.length) { div.appendChild(toolCalls(m.tool_calls)); }
      box.appendChild(div);
    } else if (reply && !error) {
      box.appendChild(pre(reply));
    }
  }

  // a step of scan.json or data.steps: a whole number from 0, else null (a string, a fraction, a huge number)
  function stepNumber(value) {
    return typeof value === "number" && Number.isSafeInteger(value) && value >= 0 ? value : null;
  }

  // the step the URL names: a string of digits, else null
  function urlStep(text) {
    return /^[0-9]{1,15}$/.test(text) ? Number(text) : null;
  }

  function stepHref(step) {
    return "#" + encodeURIComponent(current.segment) + "/" + encodeURIComponent(current.attempt) + "/step/" + step;
  }

  function stepLink(step, text) {
    var a = el("a", "step", text);
    a.href = stepHref(step);
    return a;
  }

  // text of scan.json (the agent's words, through a scanner), cut: set with textContent, never markup
  function flagText(value, limit) {
    var text = value === null || value === undefined ? "" : (typeof value === "string" ? value : JSON.stringify(value));
    limit = limit || 300;
    return text.length > limit ? text.slice(0, limit - 1) + "\u2026" : text;
  }

  // the attempt's findings: each scanner's verdict, and each piece of its evidence linked to its step when the
  // trajectory shows that step (``shown``: step -> true)
  function findings(scan, shown) {
    var list = scan && Array.isArray(scan.scanners) ? scan.scanners : [];
    if (!list.length) { return; }
    var box = section("Transcript scanners", "findings");
    box.appendChild(el("p", scan.flagged === true ? "note" : "muted", scan.flagged === true ?
      "Flagged by a transcript scanner. The flag stands beside the score and never changes it." :
      "No transcript scanner flagged this attempt."));
    list.forEach(function (f) {
      if (!f || typeof f !== "object") { return; }
      var flagged = f.flagged === true;
      var div = el("div", "finding" + (flagged ? " flagged" : ""));
      var head = el("div", "head", flagText(f.id, 80) + ": " + (f.error ? "could not scan" : (flagged ? "flagged" : "not flagged")));
      var confidence = typeof f.confidence === "number" ? f.confidence.toFixed(2) : flagText(f.confidence, 40);
      head.appendChild(el("span", "muted", " \u00b7 " + flagText(f.category, 80) + " \u00b7 confidence " + confidence));
      div.appendChild(head);
      if (f.error) { div.appendChild(el("pre", "bad", flagText(f.error, 2000))); }
      var evidence = Array.isArray(f.evidence) ? f.evidence.slice(0, 20) : [];
      if (evidence.length) {
        var ul = el("ul", "evidence");
        evidence.forEach(function (e) {
          if (!e || typeof e !== "object") { return; }
          var li = el("li");
          var step = stepNumber(e.step);
          if (step !== null && shown[step]) {
            li.appendChild(stepLink(step, "step " + step));
          } else {
            li.appendChild(el("span", "muted", e.step === null || e.step === undefined ? "no step" :
              "step " + flagText(typeof e.step === "string" ? JSON.stringify(e.step) : e.step, 40)));
          }
          if (e.tool) { li.appendChild(document.createTextNode(" \u00b7 ")); li.appendChild(el("code", null, flagText(e.tool))); }
          if (e.file) { li.appendChild(document.createTextNode(" \u00b7 file ")); li.appendChild(el("code", null, flagText(e.file))); }
          if (e.quote) { li.appendChild(document.createTextNode(": ")); li.appendChild(el("q", null, flagText(e.quote))); }
          ul.appendChild(li);
        });
        div.appendChild(ul);
      }
      box.appendChild(div);
    });
  }

  // the step the URL names: its event highlighted and scrolled to, or a note saying the trajectory does not show it
  function highlight() {
    Array.prototype.forEach.call(root.querySelectorAll(".event.highlight"), function (old) { old.classList.remove("highlight"); });
    var note = document.getElementById("step-note");
    if (note) { note.remove(); }
    if (wanted === null) { return; }
    var step = urlStep(wanted);
    var target = step === null ? null : document.getElementById("step-" + step);
    if (target) {
      target.classList.add("highlight");
      target.scrollIntoView({block: "start"});
      return;
    }
    var trajectory = document.getElementById("trajectory");
    if (!trajectory) { return; }
    note = el("p", "note", "Step " + flagText(wanted, 40) + " is not an event of this trajectory (a step is a line of " +
      "trajectory.jsonl, from 0).");
    note.id = "step-note";
    trajectory.insertBefore(note, trajectory.children[1] || null);
    trajectory.scrollIntoView({block: "start"});
  }

  // ``linked``: the attempt was scanned, and each event shows its step as a link (its anchor is there either way)
  function event(ev, i, state, step, linked) {
    var box = el("div", "event");
    box.id = "step-" + step;
    var head = el("div", "head");
    box.appendChild(head);
    var where = ev.step !== undefined ? " step " + ev.step : (ev.turn !== undefined ? " turn " + ev.turn : "");
    if (ev.type === "model_call") {
      head.textContent = "model call" + where;
      head.appendChild(el("span", "muted", usage(ev.reply && ev.reply.usage) + (ev.malformed ? " \u00b7 malformed: " + ev.malformed : "")));
      if (ev.error) { box.className += " failed"; }
      exchange(box, ev.request, ev.reply, ev.error, state);
    } else if (ev.type === "tool_result") {
      box.className += " tool" + (ev.error ? " failed" : "");
      head.textContent = "tool " + ev.name + where + (ev.error ? " (failed)" : "");
      head.appendChild(el("span", "muted", ev.tool_call_id ? " \u00b7 " + ev.tool_call_id : ""));
      box.appendChild(el("div", "role", "arguments"));
      box.appendChild(el("pre", null, args(ev.arguments)));
      box.appendChild(el("div", "role", "output"));
      box.appendChild(el("pre", ev.error ? "bad" : null, ev.output));
    } else if (ev.source === "gateway") {
      head.textContent = ev.method + " " + ev.path + " \u2192 " + ev.status;
      head.appendChild(el("span", "muted", " \u00b7 " + ev.latency_seconds + " s" + usage(ev.reply && ev.reply.usage)));
      if (ev.error || (ev.status && ev.status >= 400)) { box.className += " failed"; }
      exchange(box, ev.request, ev.reply, ev.error, state);
    } else if (ev.source && ev.message) {
      head.textContent = ev.source + " message";
      box.appendChild(message(ev.message));
    } else if (ev.unparsed !== undefined) {
      head.textContent = "a line that is not JSON";
      box.appendChild(pre(ev.unparsed));
    } else {
      head.textContent = ev.type || ev.source || "event";
      box.appendChild(pre(ev));
    }
    if (linked) {
      var anchor = stepLink(step, "#" + step);
      anchor.title = "step " + step + ": line " + step + " of trajectory.jsonl, from 0 (a link to it)";
      head.appendChild(anchor);
    }
    box.appendChild(raw(ev, "event " + (i + 1) + " as recorded"));
    return box;
  }

  function draw(data) {
    var result = data.result || {};
    var prepared = data.prepared;
    document.title = data.task_id + " attempt " + data.attempt + " \u00b7 " + document.title;
    root.replaceChildren();
    drawn = loading;

    var top = el("section");
    var h = el("h1", null, data.task_id + " \u00b7 attempt " + data.attempt + " ");
    h.appendChild(statusBadge(data.status));
    top.appendChild(h);
    root.appendChild(top);

    // each event's step: the line of trajectory.jsonl it is on (data.steps when a line was blank or split), else its index
    var events = data.trajectory || [];
    var lines = Array.isArray(data.steps) && data.steps.length === events.length ? data.steps : null;
    var steps = events.map(function (ev, i) {
      var step = lines ? stepNumber(lines[i]) : null;
      return step === null ? i : step;
    });
    var shown = {};
    steps.forEach(function (step) { shown[step] = true; });
    findings(data.scan, shown);

    var verdict = section("Verdict", "verdict");
    verdict.appendChild(table([
      ["status", statusBadge(data.status)],
      ["score", result.score === undefined ? null : result.score],
      ["correct", result.correct === undefined || result.correct === null ? "" : (result.correct ? "yes" : "no")],
      ["category", data.category],
      ["error stage", result.error_stage || undefined],
      ["retries used", result.retries_used]
    ]));
    if (result.error) {
      verdict.appendChild(el("h3", null, "error"));
      verdict.appendChild(el("pre", "bad", result.error));
    }
    if (result.ground_truth !== undefined && result.ground_truth !== null) {
      verdict.appendChild(el("h3", null, "ground truth"));
      verdict.appendChild(pre(result.ground_truth));
    }
    var evidence = result.metadata || {};
    var verifier = evidence.verifier;
    if (verifier) {
      verdict.appendChild(el("h3", null, "verifier"));
      verdict.appendChild(table([
        ["exit status", verifier.exit_status], ["timed out", verifier.timed_out],
        ["rewards", verifier.rewards === undefined ? undefined : verifier.rewards]
      ]));
      ["stdout", "stderr"].forEach(function (name) {
        if (verifier[name]) { verdict.appendChild(el("h3", null, "test " + name)); verdict.appendChild(pre(verifier[name])); }
      });
    }
    var rest = {};
    Object.keys(evidence).forEach(function (k) { if (k !== "verifier") { rest[k] = evidence[k]; } });
    if (Object.keys(rest).length) {
      verdict.appendChild(el("h3", null, "metadata"));
      verdict.appendChild(pre(rest));
    }

    var answer = section("Answer", "answer");
    if (!data.result && !data.output) {
      answer.appendChild(el("p", "muted", "this attempt has not run yet"));
    } else {
      var given = data.result ? result.answer : data.output.answer;
      answer.appendChild(given === null || given === undefined ? el("p", "muted", "no answer") : pre(given));
    }

    var input = section("Prompt and input", "input");
    if (!prepared) {
      input.appendChild(el("p", "muted", "prepared.json is not there: the attempt was not prepared"));
    } else {
      var task = prepared.input || {};
      if (task.system_prompt) { input.appendChild(el("h3", null, "system prompt")); input.appendChild(pre(task.system_prompt)); }
      (task.messages || []).forEach(function (m) { input.appendChild(message(m)); });
      input.appendChild(el("h3", null, "prompt"));
      input.appendChild(pre(task.prompt || ""));
      if (prepared.output && prepared.output.answer) {
        input.appendChild(el("h3", null, "answer form"));
        input.appendChild(pre(prepared.output.answer));
      }
      input.appendChild(table([
        ["input files", (task.files || []).join("\n") || "none"],
        ["workspace", task.workspace || "none"],
        ["media", (task.media || []).length ? task.media : undefined],
        ["tools", (task.tools || []).map(function (t) { return (t["function"] || t).name; }).join(", ") || "none"]
      ]));
      if ((task.tools || []).length) { input.appendChild(raw(task.tools, "tool definitions")); }
      input.appendChild(raw(prepared, "prepared.json"));
    }

    var trajectory = section("Trajectory", "trajectory");
    if (!events.length) {
      trajectory.appendChild(el("p", "muted", "no trajectory.jsonl: this harness called no model"));
    }
    var state = {sent: 0, toolEvents: events.some(function (e) { return e.type === "tool_result"; })};
    var linked = Boolean(data.scan);
    events.forEach(function (ev, i) { trajectory.appendChild(event(ev, i, state, steps[i], linked)); });

    var cost = section("Usage and timings", "usage");
    var rows = [];
    [["usage", result.usage || (data.output || {}).usage], ["timings", result.timings || (data.output || {}).timings],
     ["provenance", result.provenance || (data.output || {}).provenance]].forEach(function (pair) {
      Object.keys(pair[1] || {}).sort().forEach(function (k) { rows.push([pair[0] + " \u00b7 " + k, pair[1][k]]); });
    });
    cost.appendChild(rows.length ? table(rows) : el("p", "muted", "nothing recorded"));

    var files = Object.keys(data.files || {});
    if (files.length) {
      var more = section("Files of the attempt", "files");
      files.forEach(function (name) {
        more.appendChild(el("h3", null, name));
        more.appendChild(pre(data.files[name]));
      });
    }

    var logs = section("Stage logs", "logs");
    ["prepare.log", "run.log", "evaluate.log"].forEach(function (name) {
      logs.appendChild(el("h3", null, name));
      if (data.logs && data.logs[name] !== undefined) {
        logs.appendChild(data.logs[name] ? pre(data.logs[name]) : el("p", "muted", "empty (a stage writes here only when its job fails)"));
      } else {
        logs.appendChild(el("p", "muted", "not there"));
      }
    });

    var plan = section("Plan", "plan");
    plan.appendChild(data.plan ? pre(data.plan) : el("p", "muted", "plan.json is written with the verdict: not there yet"));
    highlight();
  }

  function load() {
    var hash = location.hash.slice(1);
    var named = STEP.exec(hash);
    wanted = named ? named[2] : null;
    if (named) { hash = named[1]; }
    var slash = hash.lastIndexOf("/");
    if (slash < 1) {
      root.replaceChildren(el("p", "note", "No attempt named: open this page from the report's table."));
      return;
    }
    var segment, attempt = hash.slice(slash + 1);
    try { segment = decodeURIComponent(hash.slice(0, slash)); } catch (e) { segment = hash.slice(0, slash); }
    current = {segment: segment, attempt: attempt};
    // another step of the attempt drawn: no reload, only the highlight moves
    if (drawn === segment + "/" + attempt) { highlight(); return; }
    loading = segment + "/" + attempt;
    var src = "data/attempts/" + encodeURIComponent(segment + "." + attempt) + ".js";
    window.AC_ATTEMPT = draw;
    var script = document.createElement("script");
    script.src = src;
    script.onerror = function () {
      root.replaceChildren(el("p", "note", "This report holds no data for attempt " + attempt + " of task folder " +
        segment + " (" + src + "): the attempt has not run, or the report is older than the run. " +
        "Fix: agentcompass report RUN_DIR."));
    };
    document.head.appendChild(script);
  }

  window.addEventListener("hashchange", load);
  load();
})();
