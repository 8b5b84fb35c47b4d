// The request form, generated from a model's input_schema (JSON Schema from GET /v1/models) and its limits.

import { ADAPTER_FIELDS, adapterControl, readAdapters } from "./playground-adapters.js";
import { AUDIO_FIELDS, audioControl } from "./playground-audio.js";
import { IMAGE_FIELDS, imageControl } from "./playground-image.js";

// Per-model limits that bound a field, and the model default a blank field falls back to.
const LIMIT_MAX = {
  width: "max_width", height: "max_height", num_inference_steps: "max_steps", num_images: "max_images",
  max_new_tokens: "max_new_tokens", top_k: "max_top_k",
};
const LIMIT_DEFAULT = { width: "default_width", height: "default_height", num_inference_steps: "default_steps" };
const LONG_TEXT = new Set(["prompt", "negative_prompt", "text", "texts", "stop"]);

// The JSON Schema of one property without its "or null" branch.
function plain(prop) {
  const branch = (prop.anyOf || []).find((p) => p.type !== "null");
  return branch ? { ...prop, ...branch } : prop;
}

function title(name) {
  return name.replace(/_/g, " ");
}

function control(name, prop, model) {
  const p = plain(prop);
  const limits = model.limits || {};
  let el;
  if (p.enum) {
    el = document.createElement("select");
    for (const value of p.enum) el.append(new Option(value, value, false, value === p.default));
  } else if (p.type === "boolean") {
    el = document.createElement("input");
    el.type = "checkbox";
    el.checked = Boolean(p.default);
  } else if (p.type === "integer" || p.type === "number") {
    el = document.createElement("input");
    el.type = "number";
    el.step = p.type === "integer" ? (name === "width" || name === "height" ? "8" : "1") : "any";
    const min = p.minimum ?? p.exclusiveMinimum;
    if (min !== undefined) el.min = String(min);
    const max = limits[LIMIT_MAX[name]] ?? p.maximum;
    if (max !== undefined) el.max = String(max);
    if (p.default !== undefined && p.default !== null) el.value = String(p.default);
    const fallback = limits[LIMIT_DEFAULT[name]];
    el.placeholder = fallback !== undefined ? `${fallback} (model default)` : (name === "seed" ? "random" : "");
  } else if (p.type === "array" || LONG_TEXT.has(name)) {
    el = document.createElement("textarea");
    if (p.type === "array") el.placeholder = "one per line";
    if (typeof p.default === "string") el.value = p.default;
  } else {
    el = document.createElement("input");
    el.type = "text";
    if (typeof p.default === "string") el.value = p.default;
  }
  if (typeof limits.max_prompt_chars === "number" && el.tagName === "TEXTAREA") el.maxLength = limits.max_prompt_chars;
  el.name = name;
  el.dataset.type = p.type || (p.enum ? "string" : "string");
  return el;
}

// Fill `container` with one labelled control per input field of `model`.
export function buildForm(container, model) {
  container.replaceChildren();
  const schema = model.input_schema || {};
  const required = new Set(schema.required || []);
  // The kind's example (tasks/kinds.py, via GET /v1/models); a list fills a text area one item a line.
  const example = Object.fromEntries(Object.entries(model.example_input || {})
    .map(([k, v]) => [k, Array.isArray(v) ? v.join("\n") : v]));
  const properties = schema.properties || {};
  for (const [name, prop] of Object.entries(properties)) {
    if (AUDIO_FIELDS.has(name)) { // a file or a recording, uploaded on submit
      container.append(audioControl());
      continue;
    }
    if (IMAGE_FIELDS.has(name)) { // one control for the picture and the mask painted over it
      if (name === "image") container.append(imageControl("mask" in properties, model.limits?.size_multiple));
      continue;
    }
    const el = ADAPTER_FIELDS.has(name) ? adapterControl(name, model) : control(name, prop, model);
    if (el === null) continue; // a model without adapters shows no picker
    if (example[name] !== undefined) el.value = example[name];
    if (required.has(name)) el.required = true;
    const label = document.createElement("label");
    label.className = el.tagName === "TEXTAREA" ? "wide" : "";
    if (el.type === "checkbox") {
      label.append(el, title(name));
    } else {
      label.append(title(name) + (required.has(name) ? " *" : ""), el);
    }
    if (prop.description) {
      const hint = document.createElement("span");
      hint.className = "hint";
      hint.textContent = ` ${prop.description}`;
      label.append(hint);
    }
    container.append(label);
  }
}

// The `input` object of POST /v1/jobs: blank fields are left out, so the model's defaults apply.
export function readForm(container, model) {
  const props = (model.input_schema || {}).properties || {};
  const input = {};
  for (const el of container.querySelectorAll("[name]")) {
    if (ADAPTER_FIELDS.has(el.name)) continue; // read below
    const p = plain(props[el.name] || {});
    if (el.type === "checkbox") {
      if (el.checked !== Boolean(p.default)) input[el.name] = el.checked;
      continue;
    }
    const raw = el.value.trim();
    if (raw === "") continue;
    if (p.type === "array") input[el.name] = raw.split("\n").map((s) => s.trim()).filter(Boolean);
    else if (p.type === "integer" || p.type === "number") input[el.name] = Number(raw);
    else input[el.name] = el.tagName === "TEXTAREA" ? el.value : raw;
  }
  return { ...input, ...readAdapters(container) };
}

// Mark the control the API named in a 422 (`input.width` -> the "width" control).
export function markInvalid(container, field) {
  for (const el of container.querySelectorAll(".invalid")) el.classList.remove("invalid");
  const name = (field || "").replace(/^input\./, "").replace(/\[\d+\]$/, "");
  const box = IMAGE_FIELDS.has(name) ? "image" : name; // the mask is painted on the picture's control
  const el = name && container.querySelector(`[name="${CSS.escape(name)}"], [data-field="${CSS.escape(box)}"]`);
  if (el) {
    el.classList.add("invalid");
    el.focus();
  }
}
