'use strict';
// Sends --count messages to --topic, one at a time; tag TagA/TagB/TagC by index, keys
// "key-<i>" and "k<i % 7>", body "body-<i>" padded with dots to --body-bytes, and to 5000 bytes
// for every --big-every-th message (ali-ons compresses bodies of 4 KiB and more). Prints one JSON
// line per send result, then {"done": true, ...}. Exit code 1 on a send error; with
// --keep-going 1 a failed send prints {"i": i, "error": message} instead and, after
// --error-pause-ms, the next one goes (a failover: the route refreshes every --route-poll-ms).
// ali-ons does not create topics through TBW102 as the Java client does (an unknown topic is an
// error), so with --create-on BROKER_ADDR it first creates the topic there with
// UPDATE_AND_CREATE_TOPIC (--queues queues), as `mqadmin updateTopic -b BROKER_ADDR` would.
const { Producer, Message } = require('ali-ons');
const { parseArgs, emit, clientOptions } = require('./common');

const TAGS = [ 'TagA', 'TagB', 'TagC' ];

function bodyOf(i, bodyBytes, bigEvery) {
  const head = `body-${i}`;
  if (bigEvery > 0 && i % bigEvery === 0) {
    bodyBytes = 5000;
  }
  return bodyBytes > head.length ? head + '.'.repeat(bodyBytes - head.length) : head;
}

async function main() {
  const args = parseArgs(process.argv.slice(2), {
    group: 'PG_js_interop', count: '10', 'body-bytes': '0', 'big-every': '0', sign: '1',
    'keep-going': '0', 'error-pause-ms': '200', 'route-poll-ms': '30000',
  });
  const keepGoing = args['keep-going'] === '1';
  const count = Number(args.count);
  const producer = new Producer(Object.assign(clientOptions(args), {
    producerGroup: args.group,
    retryTimesWhenSendFailed: 2,
    pollNameServerInteval: Number(args['route-poll-ms']),
  }));
  producer.on('error', err => console.error('producer error', err));
  await producer.ready();
  if (args['create-on']) {
    const queues = Number(args.queues || 4);
    await producer._mqClient.createTopic(args['create-on'], 'TBW102', {
      topicName: args.topic, readQueueNums: queues, writeQueueNums: queues, perm: 6,
      topicFilterType: 'SINGLE_TAG', topicSysFlag: 0, order: false,
    }, 3000);
    emit({ created: args.topic, on: args['create-on'], queues });
  }
  for (let i = 0; i < count; i++) {
    const tags = TAGS[i % TAGS.length];
    const msg = new Message(args.topic, tags, bodyOf(i, Number(args['body-bytes']), Number(args['big-every'])));
    msg.keys = [ `key-${i}`, `k${i % 7}` ];
    let r;
    try {
      r = await producer.send(msg);
    } catch (err) {
      if (!keepGoing) {
        throw err;
      }
      emit({ i, error: String(err && err.message || err) });
      await new Promise(resolve => setTimeout(resolve, Number(args['error-pause-ms'])));
      continue;
    }
    emit({
      i, status: r.sendStatus, msgId: r.msgId, queueId: Number(r.messageQueue.queueId),
      brokerName: r.messageQueue.brokerName, queueOffset: r.queueOffset, tags,
    });
  }
  await producer.close();
  emit({ done: true, sent: count });
}

main().then(() => process.exit(0), err => {
  console.error('producer failed', err);
  process.exit(1);
});
