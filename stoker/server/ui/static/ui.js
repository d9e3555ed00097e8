// stoker web UI: the token, actions through the REST API, charts. No data is written into
// this file or into any script: fragments carry chart data as JSON (<script type=
// "application/json">), read with JSON.parse; text goes in with textContent only.
(function () {
  "use strict";
  var KEY = "stoker-token";
  if (window.htmx) {
    // A fragment's own refusal (a job gone, a bad filter) is shown in place; other errors
    // (401 above all) are not swapped in and go to htmx:responseError below.
    window.htmx.config.responseHandling = [
      { code: "204", swap: false },
      { code: "[23]..", swap: true },
      { code: "(404|409|422)", swap: true, error: false },
      { code: "[45]..", swap: false, error: true },
    ];
  }

  function token() {
    return sessionStorage.getItem(KEY) || "";
  }

  function authHeaders(extra) {
    var h = extra || {};
    if (token()) h["Authorization"] = "Bearer " + token();
    return h;
  }

  function say(text, bad) {
    var t = document.getElementById("toast");
    if (!t) return;
    t.textContent = text;
    t.className = bad ? "toast bad" : "toast";
    clearTimeout(say.timer);
    say.timer = setTimeout(function () {
      t.textContent = "";
    }, 10000);
  }

  // --- the token ------------------------------------------------------------------------
  function askToken(why) {
    var box = document.getElementById("auth");
    document.getElementById("auth-why").textContent = why;
    if (box.hidden) {
      box.hidden = false;
      document.getElementById("auth-token").focus();
    }
  }

  function refusal(xhrOrText) {
    try {
      var body = JSON.parse(xhrOrText);
      if (body && body.error) return body.error;
    } catch (e) {
      /* not JSON */
    }
    return String(xhrOrText || "refused");
  }

  function showWho() {
    var who = document.getElementById("who");
    if (!who || document.body.dataset.auth !== "on") return;
    who.textContent = token() ? "token set · " : "";
    if (token()) {
      var forget = document.createElement("button");
      forget.type = "button";
      forget.className = "link";
      forget.textContent = "forget token";
      forget.addEventListener("click", function () {
        sessionStorage.removeItem(KEY);
        location.reload();
      });
      who.appendChild(forget);
    }
  }

  document.addEventListener("DOMContentLoaded", function () {
    var form = document.getElementById("auth-form");
    form.addEventListener("submit", function (ev) {
      ev.preventDefault();
      var value = document.getElementById("auth-token").value.trim();
      if (!value) return;
      sessionStorage.setItem(KEY, value);
      location.reload(); // every fragment again, with the token
    });
    document.querySelectorAll("form.filters").forEach(function (f) {
      f.addEventListener("submit", function (ev) {
        ev.preventDefault();
      });
    });
    if (document.body.dataset.auth === "on" && !token()) {
      askToken("This job manager needs a token.");
    }
    showWho();
  });

  document.addEventListener("htmx:configRequest", function (ev) {
    if (token()) ev.detail.headers["Authorization"] = "Bearer " + token();
    // What the target shows goes with the request: the server answers 204 (nothing to
    // download, nothing to swap) while a live fragment has not changed.
    var target = ev.detail.target;
    if (target && target.dataset && target.dataset.digest) {
      ev.detail.headers["X-Stoker-Seen"] = target.dataset.digest;
    }
  });

  document.addEventListener("htmx:afterSwap", function (ev) {
    var target = ev.detail.target;
    var digest = ev.detail.xhr && ev.detail.xhr.getResponseHeader("X-Stoker-Digest");
    if (target && target.dataset) {
      if (digest) target.dataset.digest = digest;
      else delete target.dataset.digest;
    }
  });

  document.addEventListener("htmx:responseError", function (ev) {
    var xhr = ev.detail.xhr;
    if (xhr.status === 401) {
      askToken("Refused: " + refusal(xhr.responseText));
    } else {
      say("Could not refresh (" + xhr.status + "): " + refusal(xhr.responseText), true);
    }
  });

  // --- actions: the same REST calls as the CLI -------------------------------------------
  function send(method, url, body, refreshSel) {
    var init = { method: method, headers: authHeaders({ "Content-Type": "application/json" }) };
    if (body !== undefined) init.body = JSON.stringify(body);
    say("Sending…");
    return fetch(url, init)
      .then(function (resp) {
        return resp.text().then(function (text) {
          return { status: resp.status, text: text };
        });
      })
      .then(function (r) {
        if (r.status === 401) {
          askToken("Refused: " + refusal(r.text));
          say("Refused: " + refusal(r.text), true);
          return;
        }
        if (r.status >= 400) {
          say("Refused (" + r.status + "): " + refusal(r.text), true);
          return;
        }
        var out = {};
        try {
          out = JSON.parse(r.text);
        } catch (e) {
          /* empty */
        }
        var what = out.kind ? out.kind + " " : "";
        say("Sent " + what + (out.status ? "→ " + out.status : "(" + r.status + ")") +
          (out.version !== undefined ? " (control version " + out.version + ")" : ""));
        (refreshSel || "#timeline, #controls, #summary").split(",").forEach(function (sel) {
          var el = document.querySelector(sel.trim());
          if (el && window.htmx) window.htmx.trigger(el, "refresh");
        });
      })
      .catch(function (e) {
        say("Could not send: " + e, true);
      });
  }

  function typed(input) {
    var raw = input.value;
    var kind = input.dataset.type;
    if (kind === "number") return raw.trim() === "" ? null : Number(raw);
    if (kind === "boolean") return raw.trim() === "true";
    if (kind === "string") return raw;
    try {
      return JSON.parse(raw); // like the CLI: JSON when it parses, else text
    } catch (e) {
      return raw;
    }
  }

  function bodyOf(form) {
    var kind = form.dataset.kind;
    var body = kind === "savepoint" ? {} : { kind: kind };
    if (kind === "config") {
      var set = {};
      form.querySelectorAll("input[name]").forEach(function (i) {
        if (i.value !== i.dataset.initial) set[i.name] = typed(i);
      });
      if (!Object.keys(set).length) return null;
      body.set = set;
      return body;
    }
    form.querySelectorAll("input[name], select[name]").forEach(function (i) {
      if (i.type === "checkbox") body[i.name] = i.checked;
      else if (i.dataset.optional && i.value.trim() === "") return;
      else if (i.dataset.type) body[i.name] = typed(i);
      else body[i.name] = i.value.trim();
    });
    return body;
  }

  document.addEventListener("submit", function (ev) {
    var form = ev.target;
    if (!form.classList || !form.classList.contains("action")) return;
    ev.preventDefault();
    var body = bodyOf(form);
    if (body === null) {
      say("Nothing changed: edit a value first.", true);
      return;
    }
    send("POST", form.dataset.url, body);
  });

  document.addEventListener("click", function (ev) {
    var b = ev.target.closest ? ev.target.closest("button") : null;
    if (!b) return;
    if (b.dataset.post) {
      send("POST", b.dataset.post, JSON.parse(b.dataset.body || "{}"), b.dataset.refresh);
    } else if (b.dataset.delete) {
      send("DELETE", b.dataset.delete, undefined, b.dataset.refresh);
    } else if (b.dataset.log) {
      showLog(b.dataset.log);
    }
  });

  function showLog(url) {
    var pre = document.getElementById("log");
    pre.hidden = false;
    pre.textContent = "Loading…";
    fetch(url, { headers: authHeaders() })
      .then(function (r) {
        return r.text().then(function (t) {
          pre.textContent = r.ok ? t || "(empty log)" : "Refused (" + r.status + "): " + refusal(t);
          if (r.status === 401) askToken("Refused: " + refusal(t));
        });
      })
      .catch(function (e) {
        pre.textContent = "Could not read the log: " + e;
      });
  }

  // --- charts ------------------------------------------------------------------------------
  var charts = {};
  var SPEC = {
    rows: [["rows", "rows in", "#2b6cb0"]],
    rates: [
      ["input_rate", "input rows/s", "#2b6cb0"],
      ["process_rate", "processed rows/s", "#c05621"],
    ],
    duration: [
      ["spark_ms", "Spark batch (all)", "#2f855a"],
      ["write_ms", "transform + prepare", "#805ad5"],
      ["commit_ms", "commit", "#d69e2e"],
    ],
    backlog: [["backlog", "backlog", "#c53030"]],
    executors: [["executors", "executors", "#2c7a7b"]],
  };

  function draw(data) {
    if (!window.uPlot) return;
    document.querySelectorAll("[data-chart]").forEach(function (el) {
      var name = el.dataset.chart;
      var series = SPEC[name];
      var cols = [data.t].concat(
        series.map(function (s) {
          return data[s[0]];
        })
      );
      if (charts[name]) {
        charts[name].setData(cols);
        return;
      }
      // Not before a value is known: a chart made from nulls alone has no scale to keep.
      var known = cols.slice(1).some(function (c) {
        return c.some(function (v) {
          return v !== null && v !== undefined;
        });
      });
      if (!known) return;
      var opts = {
        width: Math.max(280, el.clientWidth || 420),
        height: 180,
        series: [{}].concat(
          series.map(function (s) {
            return { label: s[1], stroke: s[2], width: 2, spanGaps: false };
          })
        ),
        axes: [{}, { size: 60 }],
      };
      charts[name] = new window.uPlot(opts, cols, el);
    });
  }

  document.addEventListener("htmx:afterSwap", function (ev) {
    var holder = ev.detail.target.querySelector("script.chart-data");
    if (holder) draw(JSON.parse(holder.textContent));
  });
})();
