// Streams (x-queue-type stream) on the queue pages: the log's facts from /api/queues
// (segments, size, first / last / committed offset), each consumer's next offset
// (/api/consumers' "offset"), and the add-queue form's rule that a stream is durable and
// neither auto-delete nor exclusive (RabbitMQ refuses the declare otherwise). What a
// stream refuses (get, purge, move messages) is hidden by queues.js with isStream().

import { bytes, h, num } from "./dom.js";

export const STREAM_ARGUMENTS = [
  ["x-max-age", "string"],
  ["x-stream-max-segment-size-bytes", "number"],
];

export function isStream(queue) {
  return queue?.type === "stream";
}

/** The stream's facts as [label, value] rows for the queue page's "Stream" panel. */
export function streamFacts(queue) {
  const offset = (value) => (typeof value === "number" && value >= 0 ? num(value) : "none");
  return [
    ["Messages kept", num(queue.messages)],
    ["Segments", num(queue.segments)],
    ["Size on disk", bytes(queue.stream_bytes)],
    ["First offset", offset(queue.first_offset)],
    ["Last offset", offset(queue.last_offset)],
    ["Committed offset", offset(queue.committed_offset)],
    ["Deliveries awaiting ack", num(queue.messages_unacknowledged)],
  ];
}

/** A stream consumer's next offset (/api/consumers, else the queue's consumer_offsets). */
export function consumerOffset(consumer, queue) {
  const value = consumer.offset ?? queue.consumer_offsets?.[consumer.consumer_tag];
  return num(value);
}

/**
 * Keep the add-queue form's durability and auto-delete selects on what a stream needs
 * while "Stream" is the chosen type (disabled, with a note saying why).
 */
export function streamRules(type, durable, autoDelete) {
  const note = h(
    "p",
    { className: "subtle", id: "stream-note", hidden: true },
    "A stream is always durable and never auto-delete or exclusive: it keeps its messages on disk until its retention (x-max-age, x-max-length-bytes) removes them.",
  );
  const apply = () => {
    const stream = type.value === "stream";
    if (stream) {
      durable.value = "true";
      autoDelete.value = "false";
    }
    durable.disabled = stream;
    autoDelete.disabled = stream;
    note.hidden = !stream;
  };
  type.addEventListener("change", apply);
  return { note, apply };
}
