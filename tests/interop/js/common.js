'use strict';
// Shared by producer.js and consumer.js: argument parsing, JSON-line output, a quiet logger.

function parseArgs(argv, defaults) {
  const out = Object.assign({}, defaults);
  for (let i = 0; i < argv.length; i += 2) {
    const key = argv[i];
    if (!key.startsWith('--') || i + 1 >= argv.length) {
      throw new Error(`bad argument ${key}: expected --name value pairs`);
    }
    out[key.slice(2)] = argv[i + 1];
  }
  return out;
}

function emit(doc) {
  process.stdout.write(JSON.stringify(doc) + '\n');
}

// ali-ons logs through options.logger; warnings and errors go to stderr (stdout is JSON only).
const logger = {
  debug() {},
  info() {},
  warn(...args) { console.error('WARN', ...args); },
  error(...args) { console.error('ERROR', ...args); },
};

// ali-ons asserts an HTTP client for Aliyun's address service; with nameSrv it is never called.
const noHttpClient = {
  request() { throw new Error('no HTTP address service here: use nameSrv'); },
};

// With accessKey/secretKey set, ali-ons signs every request (AccessKey, Signature, OnsChannel
// ext fields, as Aliyun's ACL expects); an open-source broker without ACL ignores them.
function clientOptions(args) {
  for (const name of [ 'namesrv', 'topic' ]) {
    if (!args[name]) {
      throw new Error(`--${name} is required`);
    }
  }
  const opts = {
    httpclient: noHttpClient,
    nameSrv: args.namesrv.split(';'),
    logger,
  };
  if (args.sign === '1') {
    // --access-key / --secret-key: a real account of an ACL-enabled broker (plain_acl.yml)
    opts.accessKeyId = args['access-key'] || 'haproof-placeholder-ak';
    opts.accessKeySecret = args['secret-key'] || 'haproof-placeholder-sk';
  }
  return opts;
}

module.exports = { parseArgs, emit, logger, clientOptions };
