// The adapter picker: a text-to-image model's LoRAs as checkboxes with a scale each (input.loras), a
// text-generation model's as one choice (input.adapter). The adapters come from GET /v1/models.

export const ADAPTER_FIELDS = new Set(["loras", "adapter"]);

function names(model) {
  return (model.adapters || []).map((a) => a.id);
}

// The control for `name` ("loras" or "adapter") of `model`; null when the model offers no adapters.
export function adapterControl(name, model) {
  const offered = names(model);
  if (!offered.length) return null;
  if (name === "adapter") {
    const el = document.createElement("select");
    el.name = "adapter";
    el.append(new Option("(base model)", ""));
    for (const id of offered) el.append(new Option(id, id));
    return el;
  }
  const box = document.createElement("span");
  box.dataset.field = "loras";
  box.className = "loras";
  for (const id of offered) {
    const row = document.createElement("label");
    const on = document.createElement("input");
    on.type = "checkbox";
    on.dataset.lora = id;
    const scale = document.createElement("input");
    scale.type = "number";
    scale.step = "0.1";
    scale.min = "-2";
    scale.max = "2";
    scale.value = "1";
    scale.dataset.loraScale = id;
    scale.title = "scale: 1 as trained, 0 off, < 0 away";
    row.append(on, ` ${id} `, scale);
    box.append(row);
  }
  return box;
}

// The chosen adapters as the input's fields (nothing when none is chosen: the base model).
export function readAdapters(container) {
  const out = {};
  const loras = [];
  for (const on of container.querySelectorAll("input[data-lora]")) {
    if (!on.checked) continue;
    const scale = container.querySelector(`input[data-lora-scale="${CSS.escape(on.dataset.lora)}"]`);
    loras.push({ name: on.dataset.lora, scale: Number(scale?.value || 1) });
  }
  if (loras.length) out.loras = loras;
  const adapter = container.querySelector('select[name="adapter"]');
  if (adapter && adapter.value) out.adapter = adapter.value;
  return out;
}
