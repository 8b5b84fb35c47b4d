// A job's event stream (GET /v1/jobs/{id}/events), read with fetch rather than EventSource so that the API key
// goes along as a header. A dropped connection resumes with Last-Event-ID; the stream ends with the job.

const RECONNECTS = 3;

// Parse server-sent events from a stream of text chunks: calls onMessage({id, event, data}) per message.
function parser(onMessage) {
  let buffer = "";
  let message = { id: null, event: "message", data: [] };
  return (chunk) => {
    buffer += chunk;
    const lines = buffer.split(/\r\n|\r|\n/);
    buffer = lines.pop(); // an unfinished line waits for the next chunk
    for (const line of lines) {
      if (line === "") {
        if (message.data.length) onMessage({ ...message, data: message.data.join("\n") });
        message = { id: message.id, event: "message", data: [] };
        continue;
      }
      if (line.startsWith(":")) continue; // a keep-alive comment
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
      if (field === "data") message.data.push(value);
      else if (field === "event") message.event = value;
      else if (field === "id") message.id = value;
    }
  };
}

// Follow a job: onEvent(type, data) for each event. Resolves with the finished job, or null when there is no
// stream to follow (an older API, every stream slot taken, a proxy in the way) or once stillWanted() is false:
// the caller polls instead.
export async function followEvents(url, headers, onEvent, stillWanted) {
  let lastId = null;
  for (let attempt = 0; attempt <= RECONNECTS && stillWanted(); attempt++) {
    let response;
    try {
      const extra = lastId ? { "Last-Event-ID": lastId } : {};
      response = await fetch(url, { headers: { ...headers, ...extra, Accept: "text/event-stream" } });
    } catch {
      return null;
    }
    const type = response.headers.get("Content-Type") || "";
    if (!response.ok || !type.startsWith("text/event-stream")) return null;
    let finished = null;
    const feed = parser((message) => {
      if (message.id) lastId = message.id;
      let data;
      try {
        data = JSON.parse(message.data);
      } catch {
        return;
      }
      if (message.event === "status" && data.job) finished = data.job;
      onEvent(message.event, data);
    });
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    try {
      while (!finished) {
        if (!stillWanted()) {
          reader.cancel();
          return null;
        }
        const { value, done } = await reader.read();
        if (done) break;
        feed(value);
      }
    } catch {
      // the connection dropped: resume after the last event seen
    }
    if (finished) {
      reader.cancel().catch(() => {});
      return finished;
    }
  }
  return null;
}
