// The genq playground: pick a model, fill its inputs, submit, watch the job, see the result.
// It uses only the public REST API (the same calls as `genq.Client`), with the API key if one is entered.

import { chatTab } from "./playground-chat.js";
import { followEvents } from "./playground-events.js";
import { buildForm, markInvalid, readForm } from "./playground-form.js";
import { audioInputs } from "./playground-audio.js";
import { imageInputs } from "./playground-image.js";
import { showMetrics, showResult, showStatus, showText } from "./playground-result.js";

const $ = (id) => document.getElementById(id);
const TERMINAL = new Set(["succeeded", "failed", "canceled", "expired"]);
const RECENT_KEY = "genq.playground.recent";
const RECENT_MAX = 25;
const KEY_KEY = "genq.playground.apiKey";
let models = [];
let watching = null; // the id of the job being watched; a newer watch stops an older one
let chat = null; // the chat tab (playground-chat.js)

class ApiError extends Error {
  constructor(status, body) {
    const info = (body && body.error) || {};
    super(info.message || `HTTP ${status}`);
    this.status = status;
    this.code = info.code || "http_error";
    this.field = info.field;
  }
}

function headers(extra = {}) {
  const key = $("api-key").value.trim();
  return key ? { ...extra, Authorization: `Bearer ${key}` } : extra;
}

// API paths resolve against the page, so the playground works behind a path prefix too.
function apiUrl(path) {
  return new URL(path.replace(/^\//, ""), document.baseURI).href;
}

async function call(path, options = {}) {
  let response;
  try {
    response = await fetch(apiUrl(path), { ...options, headers: headers(options.headers) });
  } catch (err) {
    throw new ApiError(0, { error: { code: "unreachable", message: `cannot reach the API (${err.message})` } });
  }
  const body = await response.json().catch(() => null);
  if (!response.ok) {
    const error = new ApiError(response.status, body);
    const retry = response.headers.get("Retry-After");
    if (retry && (response.status === 503 || response.status === 429)) error.message += ` (retry in ${retry} s)`;
    throw error;
  }
  return body;
}

// POST /v1/uploads with a picture's or audio's bytes: its upload id, for the job's image, mask or audio.
async function upload(blob) {
  const body = await call("v1/uploads", { method: "POST", headers: { "Content-Type": blob.type }, body: blob });
  return body.id;
}

async function fetchBlob(path) {
  const response = await fetch(apiUrl(path), { headers: headers() });
  if (!response.ok) throw new ApiError(response.status, await response.json().catch(() => null));
  return response.blob();
}

function showError(error) {
  const box = $("form-error");
  box.textContent = error ? `${error.code}: ${error.message}` : "";
  box.hidden = !error;
}

// --- models and the form -------------------------------------------------------------

function selected() {
  return models.find((m) => m.id === $("model").value);
}

function describe(model) {
  const l = model.limits;
  const bounds = model.display === "files" ? ` · up to ${l.max_width}×${l.max_height}, ${l.max_steps} steps` : "";
  const workers = model.workers_online === 1 ? "1 worker" : `${model.workers_online} workers`;
  $("model-info").textContent = `${model.kind} · ${workers} online · ${model.queue_depth} queued${bounds}`;
  buildForm($("fields"), model);
}

async function loadModels() {
  try {
    models = (await call("v1/models")).models;
    showError(null);
  } catch (error) {
    models = [];
    showError(error);
  }
  const select = $("model");
  const previous = select.value;
  select.replaceChildren(...models.map((m) => new Option(`${m.id} (${m.kind})`, m.id)));
  if (models.some((m) => m.id === previous)) select.value = previous;
  if (selected()) describe(selected());
  else $("fields").replaceChildren();
  if (chat) chat.fillModels();
}

function showTab(name) {
  $("jobs-view").hidden = name !== "jobs";
  $("chat-view").hidden = name !== "chat";
  $("tab-jobs").setAttribute("aria-pressed", String(name === "jobs"));
  $("tab-chat").setAttribute("aria-pressed", String(name === "chat"));
}

// --- recent jobs (this browser's localStorage) --------------------------------------------

function recent() {
  try {
    return JSON.parse(localStorage.getItem(RECENT_KEY) || "[]");
  } catch {
    return [];
  }
}

function remember(job, label) {
  const list = recent();
  const old = list.find((j) => j.id === job.id);
  const entry = { id: job.id, model: job.model, status: job.status, created_at: job.created_at,
    label: label ?? old?.label ?? "" };
  const rest = list.filter((j) => j.id !== job.id);
  localStorage.setItem(RECENT_KEY, JSON.stringify([entry, ...rest].slice(0, RECENT_MAX)));
  renderRecent();
}

function renderRecent() {
  const items = recent().map((j) => {
    const li = document.createElement("li");
    const open = document.createElement("button");
    open.type = "button";
    open.textContent = `${j.model} · ${j.status}`;
    open.addEventListener("click", () => openJob(j.id));
    const note = document.createElement("small");
    note.textContent = `${new Date(j.created_at).toLocaleString()} ${j.label}`;
    li.append(open, note);
    return li;
  });
  $("recent").replaceChildren(...items);
}

// --- a job: submit, watch, show ------------------------------------------------------------

async function show(job) {
  showStatus(job);
  showMetrics(job);
  // How its output reads comes from its model's kind (GET /v1/models), for a recent job of another model too.
  const info = models.find((m) => m.id === job.model) || models.find((m) => m.kind === job.kind);
  if (TERMINAL.has(job.status)) await showResult(job, fetchBlob, info && info.display);
  else $("result").replaceChildren();
}

// The job's event stream: status, steps and generated text as they happen. Null when there is none.
async function follow(job) {
  const live = { ...job };
  let text = "";
  return followEvents(apiUrl(`v1/jobs/${encodeURIComponent(job.id)}/events`), headers(), (type, data) => {
    if (watching !== job.id) return;
    if (type === "status" && !data.job) {
      live.status = data.status;
      remember(live);
      showStatus(live);
    } else if (type === "progress") {
      live.progress = data;
      showStatus(live);
    } else if (type === "text") {
      text = text.slice(0, data.offset) + data.text;
      showText(text);
    }
  }, () => watching === job.id);
}

async function watch(job) {
  watching = job.id;
  await show(job);
  if (TERMINAL.has(job.status)) return;
  const finished = await follow(job);
  if (watching !== job.id) return;
  if (finished) {
    remember(finished);
    await show(finished);
    return;
  }
  while (!TERMINAL.has(job.status) && watching === job.id) {
    // The API holds the request until the job ends or half a second passes: fresh progress, no busy loop.
    job = await call(`v1/jobs/${encodeURIComponent(job.id)}`, { headers: { Prefer: "wait=0.5" } });
    if (watching !== job.id) return;
    remember(job);
    await show(job);
  }
}

async function openJob(id) {
  showError(null);
  try {
    await watch(await call(`v1/jobs/${encodeURIComponent(id)}`));
  } catch (error) {
    showError(error);
  }
}

async function submit(event) {
  event.preventDefault();
  const model = selected();
  if (!model) return;
  const input = readForm($("fields"), model);
  const button = $("submit");
  button.disabled = true;
  showError(null);
  markInvalid($("fields"), null);
  try {
    Object.assign(input, await imageInputs($("fields"), upload)); // the picture and mask, uploaded first
    Object.assign(input, await audioInputs($("fields"), upload)); // the audio, uploaded first
    const job = await call("v1/jobs", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ model: model.id, input, priority: $("priority").value }),
    });
    const label = String(input.prompt ?? input.text ?? (input.texts || []).join(" / ")).slice(0, 80);
    remember(job, label);
    button.disabled = false;
    await watch(job);
  } catch (error) {
    showError(error);
    if (error.field) markInvalid($("fields"), error.field);
  } finally {
    button.disabled = false;
  }
}

async function cancel() {
  const id = $("job-id").textContent;
  try {
    const job = await call(`v1/jobs/${encodeURIComponent(id)}/cancel`, { method: "POST" });
    remember(job);
    await show(job);
  } catch (error) {
    showError(error);
  }
}

function start() {
  const key = $("api-key");
  key.value = sessionStorage.getItem(KEY_KEY) || "";
  key.addEventListener("change", () => {
    sessionStorage.setItem(KEY_KEY, key.value.trim());
    loadModels();
  });
  $("model").addEventListener("change", () => selected() && describe(selected()));
  $("job-form").addEventListener("submit", submit);
  $("cancel").addEventListener("click", cancel);
  $("clear-recent").addEventListener("click", () => {
    localStorage.removeItem(RECENT_KEY);
    renderRecent();
  });
  chat = chatTab({ call, headers, apiUrl, models: () => models });
  $("tab-jobs").addEventListener("click", () => showTab("jobs"));
  $("tab-chat").addEventListener("click", () => showTab("chat"));
  renderRecent();
  loadModels();
}

start();
