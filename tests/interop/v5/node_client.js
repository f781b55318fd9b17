// The official RocketMQ 5.x Node.js client (rocketmq-client-nodejs@1.0.8, installed in .node-rmq5 by the
// Makefile) against the bundled broker's gRPC endpoint; run by tests/interop/v5/test_v5_nodejs.py.
//
//   node node_client.js args.json
//   args: {"endpoint", "topic", "group", "send": [{"body", "tag", "keys", "messageGroup"}], "receive": n,
//          "receiveTopic"}: sends each message of `send` with a producer, then receives (and acks) until
//          `receive` messages of `receiveTopic` came with a SimpleConsumer of `group` (or 20 receives passed).
//   prints one JSON line: {"sent": [{"messageId", "offset"}], "received": [{"messageId", "body", "tag", "keys",
//          "properties", "deliveryAttempt"}]}
'use strict';

const fs = require('fs');
const { Producer, SimpleConsumer } = require('rocketmq-client-nodejs');

async function main() {
  const args = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
  const sent = [];
  if (args.send.length) {
    const producer = new Producer({ endpoints: args.endpoint });
    await producer.startup();
    for (const spec of args.send) {
      const receipt = await producer.send({
        topic: args.topic,
        body: Buffer.from(spec.body),
        tag: spec.tag,
        keys: spec.keys || [],
        messageGroup: spec.messageGroup,
      });
      sent.push({ messageId: receipt.messageId, offset: Number(receipt.offset) });
    }
    await producer.shutdown();
  }
  const received = [];
  if (args.receive > 0) {
    const subscriptions = new Map().set(args.receiveTopic, '*');
    const consumer = new SimpleConsumer({
      consumerGroup: args.group, endpoints: args.endpoint, subscriptions, awaitDuration: 2000,
    });
    await consumer.startup();
    for (let i = 0; i < 20 && received.length < args.receive; i++) {
      for (const message of await consumer.receive(16, 30000)) {
        await consumer.ack(message);
        received.push({
          messageId: message.messageId,
          body: message.body.toString(),
          tag: message.tag,
          keys: message.keys,
          properties: Object.fromEntries(message.properties),
          deliveryAttempt: message.deliveryAttempt,
        });
      }
    }
    await consumer.shutdown();
  }
  process.stdout.write(JSON.stringify({ sent, received }) + '\n');
}

main().then(() => process.exit(0), (error) => {
  process.stderr.write(`${error && error.stack ? error.stack : error}\n`);
  process.exit(1);
});
