// Drive the broker at argv[2] with @cloudamqp/amqp-client, which parses Channel.OpenOk by
// its fixed size (issue 21 item 1), and print what happened as one JSON line.
import { AMQPClient } from "@cloudamqp/amqp-client"

const client = new AMQPClient(process.argv[2])
const conn = await client.connect()
const results = {}
const ch = await conn.channel()
const ok = await ch.queueDeclare("node-café", { durable: false })
results.queue = ok.name
await ch.basicPublish("", ok.name, "hello from node", { contentType: "text/plain" })
const got = await ch.basicGet(ok.name, { noAck: true })
results.body = got.bodyToString()
const ch2 = await conn.channel()
results.channels = [ch.id, ch2.id]
const consumed = new Promise((resolve) => {
  ch2.basicConsume(ok.name, { noAck: true }, (m) => resolve(m.bodyToString()))
})
await ch.basicPublish("", ok.name, "to the consumer")
results.consumed = await consumed
await ch2.close()
await conn.close()
console.log(JSON.stringify(results))
