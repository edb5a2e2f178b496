// The approver inbox (docs/mcp-interface.md, "The approver inbox").
// The approval key lives in this tab's sessionStorage only: never localStorage,
// a cookie or a URL. Every value from the gateway is put on the page as text
// (textContent, text nodes), never as markup, so arguments cannot inject any.
"use strict";

(function () {
  const API = window.location.pathname.replace(/\/inbox\/?$/, "");
  const STORE = "crank.approval-key:" + API;
  const ID = /^approval_[0-9a-f]{32}$/;
  const ACTIVE = new Set(["pending", "approved", "executing"]);
  const REFRESH_MS = 30000;
  const TICK_MS = 15000;

  const $ = (id) => document.getElementById(id);
  let key = null;
  let loading = false;
  let again = false; // a load asked for while one ran: run once more after it
  let linkedShown = false;

  // --- the key -------------------------------------------------------------

  function storedKey() {
    try {
      return window.sessionStorage.getItem(STORE);
    } catch (_) {
      return null; // storage switched off: ask every time
    }
  }

  function keepKey(value) {
    try {
      window.sessionStorage.setItem(STORE, value);
    } catch (_) {
      /* kept in memory for this page only */
    }
  }

  function forgetKey() {
    try {
      window.sessionStorage.removeItem(STORE);
    } catch (_) {
      /* nothing kept */
    }
    key = null;
  }

  // --- talking to the gateway ----------------------------------------------

  class Refusal extends Error {
    constructor(status, code, message, body) {
      super(message);
      this.status = status;
      this.code = code;
      this.body = body || {};
    }
  }

  async function call(path, options, withKey) {
    const init = {
      method: (options && options.method) || "GET",
      headers: { Authorization: "Bearer " + (withKey || key) },
      cache: "no-store",
      credentials: "omit",
      referrerPolicy: "no-referrer",
    };
    if (options && options.body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(options.body);
    }
    let answer;
    try {
      answer = await fetch(API + path, init);
    } catch (_) {
      throw new Refusal(0, "unreachable", "");
    }
    let body = null;
    try {
      body = await answer.json();
    } catch (_) {
      body = null;
    }
    if (!answer.ok) {
      const code = (body && body.code) || "error";
      throw new Refusal(answer.status, code, (body && body.message) || "", body);
    }
    return body;
  }

  // A 403 for the page's address, not for the key: the gateway names no other
  // code for it (docs/mcp-interface.md, "The approver inbox").
  function originRefused(refusal) {
    return refusal.status === 403 && /\borigin\b/i.test(refusal.message);
  }

  // What a refusal means, in words.
  function explain(refusal) {
    if (originRefused(refusal)) {
      return "The gateway does not accept requests from this page's address (" + window.location.origin + "). Its operator sets CRANK_PUBLIC_URL to it.";
    }
    switch (refusal.status) {
      case 0:
        return "The gateway cannot be reached. Check the connection and try again.";
      case 401:
        return "The gateway did not accept this key: it is unknown, revoked or expired. Paste a valid approval key.";
      case 403:
        return "This key may not be used here: it is an agent key or another agent's approval key. Use this agent's approval key.";
      case 404:
        return "Not found: this agent is not published, or the approval is not one of this agent's.";
      case 409:
        return "Already decided: this approval is " + (refusal.body.status || "no longer pending") + " now. Nothing was changed.";
      case 429:
      case 503:
        return "The gateway is busy or cannot reach its database right now. Try again in a moment.";
      default:
        return "The gateway refused (" + refusal.status + " " + refusal.code + "): " + refusal.message;
    }
  }

  // --- small DOM helpers ---------------------------------------------------

  function el(tag, attributes, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attributes || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (name === "className") node.className = value;
      else node.setAttribute(name, value === true ? "" : String(value));
    }
    for (const child of children) {
      if (child !== null && child !== undefined) node.append(child); // strings become text
    }
    return node;
  }

  function say(text) {
    $("status").textContent = text;
  }

  function showProblem(refusal) {
    const problem = $("problem");
    if (!refusal) {
      problem.hidden = true;
      problem.textContent = "";
      problem.removeAttribute("data-status");
      problem.removeAttribute("data-code");
      return;
    }
    problem.textContent = explain(refusal);
    problem.dataset.status = String(refusal.status);
    problem.dataset.code = refusal.code;
    problem.hidden = false;
  }

  function showKeyProblem(refusal, text) {
    const field = $("key-problem");
    const input = $("key-input");
    if (!refusal && !text) {
      field.hidden = true;
      field.textContent = "";
      field.removeAttribute("data-status");
      field.removeAttribute("data-code");
      input.removeAttribute("aria-invalid");
      return;
    }
    field.textContent = text || explain(refusal);
    if (refusal) {
      field.dataset.status = String(refusal.status);
      field.dataset.code = refusal.code;
    }
    field.hidden = false;
    input.setAttribute("aria-invalid", "true");
  }

  // --- times ---------------------------------------------------------------

  function when(iso) {
    if (!iso) return "";
    const date = new Date(iso);
    return date.toLocaleString(undefined, { dateStyle: "medium", timeStyle: "short" });
  }

  function timeLeft(iso) {
    const seconds = Math.round((new Date(iso).getTime() - Date.now()) / 1000);
    if (seconds <= 0) return "past its time: it expires unanswered";
    const days = Math.floor(seconds / 86400);
    const hours = Math.floor((seconds % 86400) / 3600);
    const minutes = Math.floor((seconds % 3600) / 60);
    let text;
    if (days > 0) text = days + " d " + hours + " h";
    else if (hours > 0) text = hours + " h " + minutes + " min";
    else if (minutes > 0) text = minutes + " min";
    else text = seconds + " s";
    return "expires in " + text;
  }

  function tick() {
    for (const node of document.querySelectorAll("[data-expires]")) {
      node.textContent = timeLeft(node.dataset.expires);
    }
  }

  // --- values in readable form ---------------------------------------------

  function readable(value) {
    if (typeof value === "string") return el("span", { className: "text" }, value);
    if (value === null || typeof value !== "object") return el("code", {}, JSON.stringify(value));
    return el("pre", { className: "json" }, JSON.stringify(value, null, 2));
  }

  function fields(pairs, className) {
    const list = el("dl", { className: className });
    for (const [name, value] of pairs) {
      list.append(el("dt", {}, name), el("dd", {}, value));
    }
    return list;
  }

  function argumentList(args) {
    const names = Object.keys(args || {});
    if (names.length === 0) return el("p", { className: "quiet-text" }, "No arguments.");
    return fields(names.map((name) => [name, readable(args[name])]), "args");
  }

  const STATUS_WORDS = {
    pending: "waiting for a decision",
    approved: "approved; the call runs shortly",
    executing: "approved; the call is running",
    completed: "approved; the call completed",
    failed: "approved; the call failed",
    denied: "denied; nothing was sent",
    expired: "expired unanswered; nothing was sent",
  };

  function outcome(record) {
    const pairs = [["Status", el("span", { className: "badge badge-" + record.status }, record.status)]];
    if (record.decided_by) pairs.push(["Decided by", el("code", {}, record.decided_by)]);
    if (record.decided_at) pairs.push(["Decided at", when(record.decided_at)]);
    if (record.note) pairs.push(["Note", el("span", { className: "text" }, record.note)]);
    if (record.completed_at) pairs.push(["Finished at", when(record.completed_at)]);
    if (record.response_payload !== null && record.response_payload !== undefined) {
      pairs.push(["Result", readable(record.response_payload)]);
    }
    return fields(pairs, "outcome");
  }

  // An identical request (same tool, version and arguments) finished in the day
  // before this one was asked for: the approver sees what happened to it first.
  const BEFORE_WORDS = {
    denied: "denied",
    expired: "left unanswered until it expired",
    completed: "approved, and the call completed",
    failed: "approved, and the call failed",
  };

  function askedBefore(recent) {
    const said = ["An identical request (the same tool, version and arguments) was "];
    said.push(BEFORE_WORDS[recent.status] || recent.status);
    if (recent.decided_by) said.push(" by ", el("code", {}, recent.decided_by));
    if (recent.decided_at) said.push(" on " + when(recent.decided_at));
    said.push(": ", el("a", { href: "#" + recent.id }, recent.id), ".");
    const notice = el("div", { className: "asked-before", role: "note" });
    notice.append(el("p", {}, el("strong", {}, "Asked before. "), ...said));
    if (recent.note) notice.append(el("p", {}, "Its note: ", el("span", { className: "text" }, recent.note)));
    return notice;
  }

  // Who asked: the person a token named ("Dana Ng (dana@example.com)", the issuer and
  // client in the tooltip) or the agent key by its prefix. Never a token: the record
  // holds none.
  function requester(asker) {
    if (!asker) return "an unknown requester";
    if ("subject" in asker) {
      const title = "issuer " + asker.issuer + (asker.client_id ? " · client " + asker.client_id : "");
      const who = asker.name ? asker.name + " (" + asker.subject + ")" : asker.subject;
      return el("span", { className: "requester", title: title }, who);
    }
    return asker.key ? el("span", {}, "key ", el("code", {}, asker.key)) : "a deleted key";
  }

  // --- one approval --------------------------------------------------------

  function card(record, notes) {
    const headingId = "heading-" + record.id;
    const article = el("article", {
      className: "card card-" + record.status,
      id: record.id,
      tabindex: "-1",
      "aria-labelledby": headingId,
    });
    article.append(
      el("h3", { id: headingId }, record.tool, " ", el("span", { className: "version" }, "v" + record.version)),
      el(
        "p",
        { className: "meta" },
        el("code", { className: "id" }, record.id),
        " · asked by ",
        requester(record.requester),
        " " + when(record.created_at) + " · ",
        record.status === "pending"
          ? el("span", { className: "expiry", "data-expires": record.expires_at }, timeLeft(record.expires_at))
          : STATUS_WORDS[record.status] || record.status,
      ),
    );
    if (record.recent_identical) article.append(askedBefore(record.recent_identical));
    article.append(el("h4", {}, "Arguments"), argumentList(record.arguments));
    if (record.status === "pending") {
      article.append(decisionControls(record, notes));
    } else {
      article.append(el("h4", {}, "Outcome"), outcome(record));
    }
    return el("li", {}, article);
  }

  function decisionControls(record, notes) {
    const noteId = "note-" + record.id;
    const problemId = "problem-" + record.id;
    const note = el("textarea", {
      id: noteId,
      className: "note",
      rows: "2",
      maxlength: "2000",
      "aria-describedby": problemId,
    });
    note.value = notes.get(record.id) || "";
    const problem = el("p", { id: problemId, className: "field-problem", hidden: true });
    const approve = el("button", { type: "button", className: "approve" }, "Approve");
    const deny = el("button", { type: "button", className: "deny" }, "Deny");
    approve.addEventListener("click", () => decide(record, "approve", note, problem, [approve, deny]));
    deny.addEventListener("click", () => decide(record, "deny", note, problem, [approve, deny]));
    return el(
      "div",
      { className: "decision" },
      el("label", { for: noteId }, "Note (optional)"),
      note,
      problem,
      el("div", { className: "actions" }, approve, deny),
    );
  }

  async function decide(record, action, note, problem, buttons) {
    for (const button of buttons) button.disabled = true;
    problem.hidden = true;
    const body = { approve: action === "approve" ? "yes" : "no" };
    if (note.value.trim()) body.note = note.value;
    try {
      const decided = await call("/" + record.id + "/" + action, { method: "POST", body: body });
      say(record.tool + (decided.status === "approved" ? " approved: the call runs now." : " denied."));
      await load();
      if (decided.status === "approved") followUntilFinished(record.id);
    } catch (refusal) {
      if (!(refusal instanceof Refusal)) throw refusal;
      if (refusal.status === 401 || (refusal.status === 403 && !originRefused(refusal))) {
        return keyRefused(refusal);
      }
      problem.textContent = explain(refusal);
      problem.dataset.status = String(refusal.status);
      problem.dataset.code = refusal.code;
      problem.hidden = false;
      for (const button of buttons) button.disabled = false;
      if (refusal.status === 409) {
        // Someone else decided: show what it is now (the controls go with the refresh).
        window.setTimeout(() => load(), 4000);
      }
    }
  }

  // An approved call runs within seconds: read it until it finishes, then refresh.
  async function followUntilFinished(id) {
    for (let round = 0; round < 40 && key; round += 1) {
      await new Promise((resolve) => window.setTimeout(resolve, 1500));
      try {
        const record = await call("/" + id);
        if (!ACTIVE.has(record.status)) {
          await load();
          say(record.tool + " " + record.status + ".");
          return;
        }
      } catch (_) {
        return; // the next refresh shows what there is
      }
    }
  }

  // --- the lists -----------------------------------------------------------

  function typedNotes() {
    const notes = new Map();
    for (const note of document.querySelectorAll("textarea.note")) {
      if (note.value) notes.set(note.id.slice("note-".length), note.value);
    }
    return notes;
  }

  function fill(listId, emptyId, records, notes) {
    const list = $(listId);
    list.replaceChildren(...records.map((record) => card(record, notes)));
    $(emptyId).hidden = records.length > 0;
  }

  async function load(withKey) {
    if (loading) {
      again = true;
      return;
    }
    loading = true;
    const focused = document.activeElement && document.activeElement.id;
    const notes = typedNotes();
    try {
      const [pending, recent] = await Promise.all([
        call("?status=pending&limit=200", null, withKey),
        call("?limit=50", null, withKey),
      ]);
      if (withKey) {
        key = withKey;
        keepKey(withKey);
      }
      showProblem(null);
      showInbox(); // first: hidden elements cannot take focus
      fill("pending", "pending-empty", pending.items, notes);
      $("pending-more").hidden = !pending.next_cursor;
      fill("recent", "recent-empty", recent.items.filter((r) => r.status !== "pending"), notes);
      if (focused && $(focused)) $(focused).focus(); // a refresh keeps the place
      await showLinked(notes);
      $("updated").textContent = "Updated " + new Date().toLocaleTimeString();
    } catch (refusal) {
      if (!(refusal instanceof Refusal)) throw refusal;
      if (refusal.status === 401 || (refusal.status === 403 && !originRefused(refusal))) {
        keyRefused(refusal);
      } else {
        showProblem(refusal);
      }
    } finally {
      loading = false;
    }
    if (again && key) {
      again = false;
      await load();
    }
  }

  // The approval named by the URL's fragment (#approval_...): highlighted where it
  // is listed, else read and shown on its own.
  async function showLinked(notes) {
    const section = $("linked-section");
    for (const old of document.querySelectorAll(".card.linked")) old.classList.remove("linked");
    const id = window.location.hash.slice(1);
    if (!ID.test(id)) {
      section.hidden = true;
      $("linked").replaceChildren();
      return;
    }
    let found = document.querySelector("#pending [id='" + id + "'], #recent [id='" + id + "']");
    if (found) {
      section.hidden = true;
      $("linked").replaceChildren();
    } else {
      try {
        const record = await call("/" + id);
        $("linked").replaceChildren(card(record, notes));
        found = $(id);
      } catch (refusal) {
        if (!(refusal instanceof Refusal) || refusal.status === 401 || refusal.status === 403) throw refusal;
        $("linked").replaceChildren(
          el("li", {}, el("p", { className: "field-problem", "data-status": refusal.status, "data-code": refusal.code }, id + ": " + explain(refusal))),
        );
      }
      section.hidden = false;
    }
    if (found) {
      found.classList.add("linked");
      if (!linkedShown) {
        linkedShown = true; // once per fragment: a refresh must not pull the view back
        found.scrollIntoView({ block: "start" });
        found.focus({ preventScroll: true });
      }
    }
  }

  // --- the two states of the page ------------------------------------------

  function showInbox() {
    $("key-prompt").hidden = true;
    $("inbox").hidden = false;
    $("forget-key").hidden = false;
  }

  function showPrompt() {
    $("inbox").hidden = true;
    $("forget-key").hidden = true;
    $("key-prompt").hidden = false;
    $("pending").replaceChildren();
    $("recent").replaceChildren();
    $("linked").replaceChildren();
    $("key-input").focus();
  }

  function keyRefused(refusal) {
    forgetKey();
    showProblem(null);
    showKeyProblem(refusal);
    showPrompt();
  }

  function start() {
    const name = API.match(/\/v1\/([^/]+)\/([^/]+)\/approvals$/);
    if (name) {
      let agent = name[1] + "/" + name[2];
      try {
        agent = decodeURIComponent(agent);
      } catch (_) {
        /* a malformed escape: show the path as it is */
      }
      $("agent-name").textContent = agent;
      document.title = "Approvals of " + agent + " · Crank";
    }
    $("key-form").addEventListener("submit", async (event) => {
      event.preventDefault(); // nothing is posted: the key goes to the API in a header
      const input = $("key-input");
      const value = input.value.trim();
      if (!value) {
        showKeyProblem(null, "Paste the approval key first.");
        input.focus();
        return;
      }
      showKeyProblem(null);
      say("Checking the key…");
      await load(value);
      if (key) {
        input.value = "";
        say("The key is kept in this tab until you close it or forget it.");
      } else {
        say("");
      }
    });
    $("forget-key").addEventListener("click", () => {
      forgetKey();
      showProblem(null);
      showKeyProblem(null);
      showPrompt();
      say("The key is forgotten.");
    });
    $("refresh").addEventListener("click", () => load());
    window.addEventListener("hashchange", () => {
      linkedShown = false;
      if (key) load();
    });
    window.setInterval(tick, TICK_MS);
    window.setInterval(() => {
      const busy = document.activeElement && document.activeElement.closest && document.activeElement.closest(".card");
      if (key && !busy && document.visibilityState === "visible") load();
    }, REFRESH_MS);

    const kept = storedKey();
    if (kept) {
      load(kept);
    } else {
      showPrompt();
    }
  }

  start();
})();
