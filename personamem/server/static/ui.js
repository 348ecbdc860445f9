// The inspector: plain DOM and fetch, no framework, nothing loaded from elsewhere. Every datum comes
// from the /v1 routes with the tab's API key; the selected user lives in this script, not in the URL.
"use strict";

const state = { key: sessionStorage.getItem("personamem-key"), user: null, offset: 0, limit: 100 };
const $ = (id) => document.getElementById(id);

function el(tag, text, attrs = {}) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, value);
  return node;
}

function row(cells, attrs = {}) {
  const tr = el("tr", null, attrs);
  for (const cell of cells) {
    const td = el("td");
    if (cell instanceof Node) td.append(cell); else td.textContent = cell ?? "";
    tr.append(td);
  }
  return tr;
}

async function api(method, path, params = {}, body = undefined) {
  const url = new URL(path, location.origin);
  for (const [name, value] of Object.entries(params)) url.searchParams.set(name, value);
  const response = await fetch(url, {
    method,
    headers: { Authorization: `Bearer ${state.key}`, ...(body ? { "Content-Type": "application/json" } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  if (response.status === 401) { logout("that key was refused"); throw new Error("unauthorized"); }
  const isJson = (response.headers.get("content-type") || "").includes("json");
  const data = isJson ? await response.json() : await response.blob();
  if (!response.ok) throw new Error(data.error ? data.error.message : `HTTP ${response.status}`);
  return data;
}

function logout(reason) {
  sessionStorage.removeItem("personamem-key");
  state.key = null;
  show("login");
  $("login-error").textContent = reason || "";
}

function show(page) {
  for (const section of document.querySelectorAll("main > section")) section.hidden = section.id !== page;
  for (const tab of document.querySelectorAll("#tabs button")) tab.classList.toggle("active", tab.dataset.page === page);
  for (const span of document.querySelectorAll(".current-user")) span.textContent = state.user ?? "(pick a user)";
  $("error").textContent = "";
}

async function open(page) {
  if (!state.key) return logout();
  if (["memory", "calls", "playground"].includes(page) && !state.user) page = "users";
  show(page);
  try {
    await loaders[page]();
  } catch (error) {
    if (error.message !== "unauthorized") $("error").textContent = error.message;
  }
}

function pick(user) { state.user = user; state.offset = 0; open("memory"); }

const loaders = {
  async users() {
    const data = await api("GET", "/v1/ui/users", { q: $("user-q").value });
    $("users-count").textContent = `${data.count} user(s)`;
    const rows = data.users.map((u) => {
      const link = el("a", u.user_id);
      link.addEventListener("click", () => pick(u.user_id));
      return row([link, u.records, u.last_call ?? "–"]);
    });
    $("users-rows").replaceChildren(...rows);
  },

  async memory() {
    const params = { user_id: state.user, kind: $("f-kind").value, category: $("f-category").value,
                     validity: $("f-validity").value, offset: state.offset, limit: state.limit };
    const [data, preference] = await Promise.all([
      api("GET", "/v1/ui/records", params), api("GET", "/v1/ui/memory", { user_id: state.user })]);
    const kinds = $("f-kind");
    for (const kind of data.kinds) if (![...kinds.options].some((o) => o.value === kind)) kinds.append(el("option", kind, { value: kind }));
    $("records-count").textContent = `${data.count} record(s)`;
    $("page-at").textContent = `${data.count ? state.offset + 1 : 0}–${Math.min(state.offset + state.limit, data.count)}`;
    $("prev").disabled = state.offset === 0;
    $("next").disabled = state.offset + state.limit >= data.count;
    const now = new Date();
    $("records-rows").replaceChildren(...data.records.map((r) => {
      const current = (!r.valid_from || new Date(r.valid_from) <= now) && (!r.valid_until || now < new Date(r.valid_until));
      const valid = r.valid_until ? `until ${r.valid_until}` : r.valid_from ? `from ${r.valid_from}` : "always";
      const actions = el("span");
      const edit = el("button", "edit"), remove = el("button", "delete", { class: "danger" });
      edit.addEventListener("click", () => editRecord(r));
      remove.addEventListener("click", () => deleteRecord(r));
      actions.append(edit, " ", remove);
      return row([r.id, r.kind, r.text, valid + (r.expires_at ? `; expires ${r.expires_at}` : ""), actions],
                 { "data-id": r.id, class: current ? "" : "old" });
    }));
    const box = $("preference");
    if (!preference.configured) {
      box.replaceChildren(el("p", "This server keeps no preference memory (its pipeline's preference_memory is none).", { class: "muted" }));
    } else {
      const list = el("ul");
      for (const statement of preference.statements || []) {
        const item = el("li", statement.text + " ");
        for (const id of statement.evidence || []) {
          const link = el("a", `[${id.slice(0, 8)}]`, { title: id });
          link.addEventListener("click", () => document.querySelector(`tr[data-id="${CSS.escape(id)}"]`)?.scrollIntoView());
          item.append(link, " ");
        }
        list.append(item);
      }
      box.replaceChildren(el("p", preference.stale ? "stale: records changed since it was built" : "current", { class: "muted" }), list);
    }
  },

  async calls() {
    const data = await api("GET", "/v1/ui/calls", { user_id: state.user });
    $("calls-note").textContent = data.logging ? `${data.calls.length} call(s), newest first`
      : "Interaction logging is off on this server (log_interactions = true turns it on).";
    $("calls-list").replaceChildren(...data.calls.map((call) => {
      const box = el("div", null, { class: "call" });
      box.append(el("strong", `${call.call} · ${call.method}`), el("span", ` ${call.time}`, { class: "muted" }));
      box.append(el("p", `query: ${call.query}`));
      box.append(el("p", `results: ${call.results.map((r) => `${r.record_id} (${r.score.toFixed(3)})`).join(", ") || "none"}`));
      if (call.feedback) box.append(el("p", `feedback: rating ${call.feedback.rating ?? "–"}, used ${(call.feedback.used_record_ids || []).join(", ") || "–"}, answer ${call.feedback.answer ?? "–"}`));
      if (call.trace) {
        const t = call.trace;
        box.append(el("p", `tokens ${t.tokens}/${t.budget_tokens}; LLM tokens ${t.usage.prompt_tokens + t.usage.completion_tokens}; ` +
          `encoder tokens ${t.usage.encoder_tokens ?? "–"}; ` +
          Object.entries(t.timings_ms).map(([stage, ms]) => `${stage} ${ms.toFixed(1)} ms`).join(", ")));
        for (const warning of t.warnings) box.append(el("p", `warning: ${warning}`, { class: "error" }));
        box.append(el("pre", t.text || "(empty context)"));
      } else if (call.call === "context") {
        box.append(el("p", "The text shown was dropped when a record of this user was deleted.", { class: "muted" }));
      }
      return box;
    }));
  },

  async playground() {},

  async reports() {
    const [pipeline, reports] = await Promise.all([api("GET", "/v1/ui/pipeline"), api("GET", "/v1/ui/reports")]);
    $("pipeline").textContent = JSON.stringify({ first_stage: pipeline.first_stage, trials: pipeline.trials, checkpoints: pipeline.checkpoints, config: pipeline.config }, null, 2);
    await deadLetters();
    if (!reports.folder) {
      $("report-list").replaceChildren(el("li", "No reports folder (serve --reports DIR).", { class: "muted" }));
      return;
    }
    $("report-list").replaceChildren(...reports.reports.map((r) => {
      const link = el("a", r.path);
      link.addEventListener("click", () => showReport(r.path));
      const item = el("li");
      item.append(link, el("span", ` ${new Date(r.modified * 1000).toISOString()}`, { class: "muted" }));
      return item;
    }));
  },
};

// deliveries that ran out of attempts (ids only); listing and retrying them takes an admin key
async function deadLetters() {
  let data;
  try {
    data = await api("GET", "/v1/webhooks/dead");
  } catch (error) {
    $("dead-note").textContent = error.message === "unauthorized" ? "" : `Not shown: ${error.message}`;
    $("dead-rows").replaceChildren();
    return;
  }
  $("dead-note").textContent = data.dead.length ? `${data.dead.length} dead letter(s), newest first` : "None: every webhook event was delivered or is still being retried.";
  $("dead-rows").replaceChildren(...data.dead.map((d) => {
    const retry = el("button", "retry");
    retry.addEventListener("click", async () => {
      await api("POST", `/v1/webhooks/dead/${encodeURIComponent(d.event_id)}/retry`);
      await deadLetters();
    });
    return row([d.event_id, d.type, JSON.stringify(d.data), d.attempts, d.last_error ?? "–", retry]);
  }));
}

async function showReport(path) {
  const data = await api("GET", "/v1/ui/report", { path });
  const view = $("report-view");
  if (data instanceof Blob && data.type.startsWith("image/")) {
    view.replaceChildren(el("img", null, { src: URL.createObjectURL(data), alt: path }));
  } else {
    view.replaceChildren(el("pre", data instanceof Blob ? await data.text() : JSON.stringify(data, null, 2)));
  }
}

async function editRecord(record) {
  const text = prompt(`New text for ${record.id}`, record.text);
  if (text === null || text === record.text) return;
  await api("PATCH", `/v1/records/${encodeURIComponent(record.id)}`, { user_id: state.user }, { text });
  await loaders.memory();
}

async function deleteRecord(record) {
  if (!confirm(`Delete record ${record.id}? Its text, vector and anything derived from it are erased.`)) return;
  await api("DELETE", `/v1/records/${encodeURIComponent(record.id)}`, { user_id: state.user });
  await loaders.memory();
}

async function compare(event) {
  event.preventDefault();
  const body = { user_id: state.user, query: $("p-query").value, left: $("p-left").value, right: $("p-right").value, k: 10 };
  try {
    const data = await api("POST", "/v1/ui/compare", {}, body);
    const moved = new Set(data.moved.map((m) => m.id));
    for (const side of ["left", "right"]) {
      const header = row([`rank (${body[side]})`, "score", "text"]);
      $(side).replaceChildren(header, ...data[side].map((h) =>
        row([h.rank, h.score.toFixed(3), h.record.text], { class: moved.has(h.record.id) ? "moved" : "", "data-id": h.record.id })));
    }
    $("moved").textContent = `${data.moved.length} record(s) moved: ` +
      data.moved.map((m) => `${m.id.slice(0, 8)} ${m.left ?? "–"}→${m.right ?? "–"}`).join(", ");
  } catch (error) {
    $("error").textContent = error.message;
  }
}

$("login-form").addEventListener("submit", (event) => {
  event.preventDefault();
  state.key = $("key").value.trim();
  sessionStorage.setItem("personamem-key", state.key);
  open("users");
});
$("user-search").addEventListener("submit", (event) => { event.preventDefault(); open("users"); });
$("record-filter").addEventListener("submit", (event) => { event.preventDefault(); state.offset = 0; open("memory"); });
$("prev").addEventListener("click", () => { state.offset = Math.max(0, state.offset - state.limit); open("memory"); });
$("next").addEventListener("click", () => { state.offset += state.limit; open("memory"); });
$("compare-form").addEventListener("submit", compare);
$("forget").addEventListener("click", async () => {
  const typed = prompt(`Forget ${state.user}: every record, vector and log entry is erased. Type the user id to confirm.`);
  if (typed !== state.user) { $("error").textContent = "not forgotten: the id typed did not match"; return; }
  await api("DELETE", "/v1/users", { user_id: state.user });
  state.user = null;
  open("users");
});
for (const tab of document.querySelectorAll("#tabs button")) tab.addEventListener("click", () => open(tab.dataset.page));
open("users");
