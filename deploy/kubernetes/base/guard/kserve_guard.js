// KServe v2 request checks in front of Triton's HTTP endpoint (nginx njs, 0.7.9 and later).
//
// nginx.conf.template routes here:
//   infer(r)     POST /v2/models/<m>[/versions/<v>]/infer, .../generate, .../generate_stream
//   jsonBody(r)  every other POST (repository, trace, logging, shared-memory APIs)
//   keyed(r)     (js_set $guard_keyed) "1" when the request carries the repository key: a
//                repository load request that does may be large (a rollout's upload mode)
//   unlocked(r)  (js_set $guard_unlocked) "1" when the request may change the guard's routes:
//                it carries the key, or the server has none
// Each handler either refuses the request (400 and {"error": "..."}, the way Triton's HTTP
// frontend phrases its errors) or hands it to the location @triton, body unchanged, or, for an
// infer request whose queue timeout the guard lowers (see queueTimeout), to @triton_deadline with
// the body that carries it. What each check covers (the Triton fix, the release that has it):
// docs/operations/http_guard.md; the deadlines: docs/operations/reliability.md.
//
// Settings, rendered into the config as js_var (tritonrepo/server/http_guard_config.py):
//   $guard_max_depth         deepest JSON nesting accepted (objects and arrays), levels
//   $guard_max_tensor_bytes  largest input tensor (elements x datatype size), bytes
//   $guard_max_json_bytes    largest JSON text parsed (a JSON body, or the JSON header of a
//                            binary request), bytes: JSON.parse holds the whole value in memory
//   $guard_max_timeout_us    longest queue timeout an infer request is sent with, µs (shorter
//                            than the guard's own wait for Triton's answer)
// and, set here for @triton_deadline: $guard_body (the rewritten body), $guard_header_length
// (its Inference-Header-Content-Length, empty for a JSON body).

import fs from 'fs';
import routes from 'routes.js';

// Bytes per element (KServe v2 datatypes, Triton's TRITONSERVER_DataTypeByteSize); BYTES
// elements have no fixed size (4-byte length prefix + the bytes in binary form).
const DTYPE_SIZE = {
    BOOL: 1, UINT8: 1, INT8: 1, UINT16: 2, INT16: 2, FP16: 2, BF16: 2,
    UINT32: 4, INT32: 4, FP32: 4, UINT64: 8, INT64: 8, FP64: 8, BYTES: 0,
};
const BYTES_PREFIX = 4;  // length prefix of one BYTES element in binary form
const MAX_EXACT = 9007199254740991;  // 2^53 - 1: integers a double holds exactly
const INFER_PATH = /^\/v2\/models\/([^\/]+)(?:\/versions\/([0-9]+))?\/(infer|generate|generate_stream)$/;
const SAFE_NAME = /^[A-Za-z0-9_.\-]+$/;
const MAX_HEADER_MS = 999999999;  // 9 digits: about 11.5 days, above any cap

function setting(r, name, fallback) {
    const value = Number(r.variables[name]);
    return Number.isFinite(value) && value > 0 ? value : fallback;
}

// Every [name, value] of the header `name` the request carries (a name given twice must be
// seen twice); the raw headers are read only when it is there at all (a lookup, not a loop
// over every header, on each request).
function sameHeaders(r, name) {
    if (r.headersIn[name] === undefined) {
        return [];
    }
    const lower = name.toLowerCase();
    return r.rawHeadersIn.filter((h) => h[0].toLowerCase() === lower);
}

function refuse(r, rule, message, status) {
    r.variables.guard_rule = rule;
    r.warn(`http guard refused ${r.method} ${r.uri} (${rule}): ${message}`);
    r.headersOut['Content-Type'] = 'application/json';
    r.return(status || 400, JSON.stringify({ error: `http guard: ${message}` }));
}

// The request body as one buffer, or {error} when the guard cannot see it in memory: njs
// throws for a body nginx wrote to a temporary file (a chunked body whose framing outgrew
// client_body_buffer_size), and a body that was announced but is absent is not passed
// unchecked either (fail closed).
function readBody(r) {
    let body;
    try {
        body = r.requestBuffer;
    } catch (e) {
        return { error: ['body_unreadable', `the request body cannot be checked in memory (${e.message}); send it with a Content-Length`] };
    }
    const announced = Number(r.headersIn['Content-Length'] || 0) > 0 || r.headersIn['Transfer-Encoding'] !== undefined;
    if (body === undefined && announced) {
        return { error: ['body_unreadable', 'the request body cannot be checked in memory; send it with a Content-Length'] };
    }
    return { body: body };
}

// The JSON text of a body (at most $guard_max_json_bytes bytes), or {error} (413).
function jsonText(r, body, jsonBytes) {
    const limit = setting(r, 'guard_max_json_bytes', 16777216);
    if (jsonBytes > limit) {
        return { error: ['json_too_large', `JSON of ${jsonBytes} bytes is larger than ${limit} bytes; send large tensors as binary data (binary_data_size)`] };
    }
    return { text: jsonBytes === body.length ? body.toString() : body.slice(0, jsonBytes).toString() };
}

// Hand the request to Triton: unchanged, or with `rewrite` ({ body, jsonBytes, headerGiven }
// from withTimeout) as its body.
// A canary route (routes.js choose) sends it to the canary model instead ($guard_route), or
// copies it to the shadow comparison (@triton_shadowed mirrors it; not a request whose queue
// timeout the guard rewrote).
function pass(r, rewrite) {
    const choice = routes.choose(r);
    if (choice && choice.kind === 'canary') {
        r.variables.guard_route = choice.uri;
    }
    const shadowed = choice && choice.kind === 'shadow';
    if (shadowed) {
        r.variables.guard_shadow_model = choice.model;
    }
    if (!rewrite) {
        r.internalRedirect(shadowed ? '@triton_shadowed' : '@triton');
        return;
    }
    r.variables.guard_body = rewrite.body;
    r.variables.guard_header_length = rewrite.headerGiven ? String(rewrite.jsonBytes) : '';
    r.internalRedirect(shadowed ? '@triton_deadline_shadowed' : '@triton_deadline');
}

function isObject(v) {
    return v !== null && typeof v === 'object' && !Array.isArray(v);
}

function isUint(v) {
    return typeof v === 'number' && Number.isInteger(v) && v >= 0 && v <= MAX_EXACT;
}

// Keys and the colons inside strings (keys and values) of a parsed JSON value, and its
// deepest nesting (the top level = 1), into `acc`; stops descending past `limit`. A JSON text
// without duplicate keys has exactly keys + colons-in-strings colons. Linear in the elements
// (njs 0.7's global regular expressions are quadratic in their matches, so none are used), and
// without a closure per call: this walk is on every request, and numbers, most of a tensor's
// elements, cost one typeof each.
function census(value, depth, limit, acc) {
    if (depth > acc.depth) {
        acc.depth = depth;
    }
    if (depth > limit) {
        return;
    }
    if (Array.isArray(value)) {
        for (let i = 0; i < value.length; i++) {
            const e = value[i];
            const kind = typeof e;
            if (kind === 'object') {
                if (e !== null) {
                    census(e, depth + 1, limit, acc);
                }
            } else if (kind === 'string' && e.indexOf(':') !== -1) {
                acc.colons += e.split(':').length - 1;
            }
        }
        return;
    }
    for (const key in value) {
        acc.colons += 1;
        if (key.indexOf(':') !== -1) {
            acc.colons += key.split(':').length - 1;
        }
        const e = value[key];
        const kind = typeof e;
        if (kind === 'object') {
            if (e !== null) {
                census(e, depth + 1, limit, acc);
            }
        } else if (kind === 'string' && e.indexOf(':') !== -1) {
            acc.colons += e.split(':').length - 1;
        }
    }
}

function occurrences(text, part) {
    return text.split(part).length - 1;
}

// Parse the request JSON, or say why not: { error: [rule, message] }; else { value,
// approximated } (approximated: NaN/Infinity were read as 0 for the checks). Refuses nesting deeper
// than $guard_max_depth (njs' own JSON.parse stops at 31 levels) and duplicate keys: Triton's
// parser (rapidjson) reads the first of two equal keys, JavaScript the last, so a duplicate
// could show this guard one value and Triton another.
function parseJson(r, text) {
    const limit = setting(r, 'guard_max_depth', 20);
    const tooDeep = { error: ['json_depth', `JSON nesting is deeper than ${limit} levels`] };
    let checked = text;
    let value;
    try {
        value = JSON.parse(checked);
    } catch (e) {
        if (/too deep/i.test(e.message)) {
            return tooDeep;
        }
        if (checked.indexOf('NaN') === -1 && checked.indexOf('Infinity') === -1) {
            return { error: ['json_syntax', `failed to parse the request JSON: ${e.message}`] };
        }
        // Triton's parser takes NaN and Infinity (rapidjson kParseNanAndInfFlag) and
        // tritonclient sends them for FP32/FP64 JSON data; JSON.parse does not. Checked as 0.
        checked = checked.split('-Infinity').join('0').split('Infinity').join('0')
            .split('NaN').join('0');
        try {
            value = JSON.parse(checked);
        } catch (e2) {
            return /too deep/i.test(e2.message) ? tooDeep
                : { error: ['json_syntax', `failed to parse the request JSON: ${e2.message}`] };
        }
    }
    const acc = { colons: 0, depth: 0 };
    if (value !== null && typeof value === 'object') {
        census(value, 1, limit, acc);
    }
    if (acc.depth > limit) {
        return tooDeep;
    }
    // A colon written as \u003a is one in the parsed strings but none in the text (searched
    // once: two splits of the whole text cost 4 µs a request).
    const escaped = checked.indexOf('\\u003') === -1 ? 0
        : occurrences(checked, '\\u003a') + occurrences(checked, '\\u003A');
    if (occurrences(checked, ':') + escaped !== acc.colons) {
        return { error: ['json_duplicate_key', 'the request JSON has a duplicate key'] };
    }
    return { value: value, approximated: checked !== text };
}

// Element count of `shape` (double math, exact below 2^53), or [rule, message].
function elementCount(name, shape) {
    if (!Array.isArray(shape)) {
        return { error: ['shape_type', `Unable to parse 'shape' of input '${name}': expected an array`] };
    }
    let count = 1;
    for (let i = 0; i < shape.length; i++) {
        const d = shape[i];
        if (typeof d !== 'number' || !Number.isInteger(d)) {
            return { error: ['shape_type', `Unable to parse 'shape' of input '${name}': dimensions are integers`] };
        }
        if (d < 0) {
            return { error: ['shape_negative', `input '${name}' has a negative dimension in shape ${JSON.stringify(shape)}`] };
        }
        if (d > MAX_EXACT) {
            return { error: ['shape_overflow', `input '${name}' has a dimension above 2^53 in shape ${JSON.stringify(shape)}`] };
        }
        count *= d;
        // Checked per dimension: a product that overflowed to Infinity and then met a 0 is
        // NaN, which every later comparison would let through.
        if (!(count <= MAX_EXACT)) {
            return { error: ['shape_overflow', `shape ${JSON.stringify(shape)} of input '${name}' has more than 2^53 elements`] };
        }
    }
    if (!(count <= MAX_EXACT)) {
        return { error: ['shape_overflow', `shape ${JSON.stringify(shape)} of input '${name}' has more than 2^53 elements`] };
    }
    return { count: count };
}

// What a JSON `data` element of each datatype must be, as Triton's parser reads it
// (HTTPAPIServer, rapidjson GetDouble / GetInt64 / GetUint64 / GetBool / GetString): another
// JSON type there is an HTTP 500 from Triton ("attempt to access JSON non-number as double").
function elementKind(datatype) {
    if (datatype === 'BOOL') {
        return 'a boolean';
    }
    if (datatype === 'BYTES') {
        return 'a string';
    }
    if (datatype.charAt(0) === 'U') {
        return 'an unsigned integer';
    }
    if (datatype.charAt(0) === 'I') {
        return 'an integer';
    }
    return 'a number';
}

// A predicate per JSON type of an element (named functions: Array.prototype.every with one
// is several times faster in njs than a loop written here, and most tensors are flat).
const FITS = {
    'a number': (e) => typeof e === 'number',
    'an integer': (e) => typeof e === 'number' && Number.isInteger(e),
    'an unsigned integer': (e) => typeof e === 'number' && Number.isInteger(e) && e >= 0,
    'a boolean': (e) => typeof e === 'boolean',
    'a string': (e) => typeof e === 'string',
};

// Leaves of nested `data` arrays into acc ({ count, bad }), in order; stops at the first leaf
// that does not fit (acc.bad = { index, value }).
function leaves(v, fits, acc) {
    if (!Array.isArray(v)) {
        if (!fits(v)) {
            acc.bad = { index: acc.count, value: v };
            return;
        }
        acc.count += 1;
        return;
    }
    if (v.every(fits)) {
        acc.count += v.length;
        return;
    }
    for (let i = 0; i < v.length && !acc.bad; i++) {
        leaves(v[i], fits, acc);
    }
}

// The JSON `data` of an input: nested arrays whose leaves are of the datatype's JSON type, as
// many as the shape has elements. [rule, message] or null; each is a 400 here, where Triton
// 2.51 answers 500 ("Unable to parse 'data'").
function checkData(name, datatype, shape, data, elements) {
    const kind = elementKind(datatype);
    const acc = { count: 0, bad: null };
    leaves(data, FITS[kind], acc);
    if (acc.bad) {
        return ['data_type', `input '${name}' (${datatype}): element ${acc.bad.index} of 'data' is ${JSON.stringify(acc.bad.value)}, expected ${kind}`];
    }
    if (acc.count !== elements) {
        return ['data_count', `input '${name}' has ${acc.count} elements in 'data', its shape ${JSON.stringify(shape)} has ${elements}`];
    }
    return null;
}

// One input of an infer request; returns [rule, message] or null, adds binary_data_size to
// totals.binary.
function checkInput(r, input, jsonBytes, totals) {
    if (!isObject(input)) {
        return ['input_type', "Unable to parse 'inputs': each input is an object"];
    }
    const name = input.name;
    if (typeof name !== 'string') {
        return ['input_name', "Unable to parse 'name' of an input: expected a string"];
    }
    const datatype = input.datatype;
    if (typeof datatype !== 'string' || !(datatype in DTYPE_SIZE)) {
        return ['datatype', `input '${name}' has an unknown datatype ${JSON.stringify(datatype)}`];
    }
    const shape = elementCount(name, input.shape);
    if (shape.error) {
        return shape.error;
    }
    const elements = shape.count;
    const size = DTYPE_SIZE[datatype];
    const params = input.parameters;
    if (params !== undefined && !isObject(params)) {
        return ['parameters_type', `'parameters' of input '${name}' must be an object`];
    }
    const hasData = 'data' in input;
    const hasBinary = params !== undefined && 'binary_data_size' in params;
    const hasShm = params !== undefined && 'shared_memory_region' in params;
    if (hasData + hasBinary + hasShm !== 1) {
        return ['input_content', `input '${name}' must set exactly one of 'data', 'binary_data_size' in 'parameters', 'shared_memory_region' in 'parameters'`];
    }
    if (hasData && elements > jsonBytes) {
        // Every element of JSON 'data' takes at least one byte of the request JSON.
        return ['shape_vs_body', `shape ${JSON.stringify(input.shape)} of input '${name}' has ${elements} elements, more than a request JSON of ${jsonBytes} bytes can hold`];
    }
    if (hasData) {
        const error = checkData(name, datatype, input.shape, input.data, elements);
        if (error) {
            return error;
        }
    }
    if (hasBinary) {
        const declared = params.binary_data_size;
        if (!isUint(declared)) {
            return ['binary_data_size', `Unable to parse 'binary_data_size' of input '${name}': expected an unsigned integer`];
        }
        const needed = elements * (size || BYTES_PREFIX);
        if (needed > declared) {
            return ['shape_vs_binary_size', `shape ${JSON.stringify(input.shape)} of input '${name}' (${datatype}) needs at least ${needed} bytes, 'binary_data_size' is ${declared}`];
        }
        totals.binary += declared;
    }
    const maxTensor = setting(r, 'guard_max_tensor_bytes', 1 << 30);
    const bytes = elements * Math.max(size, 1);
    if (bytes > maxTensor) {
        return ['tensor_too_large', `shape ${JSON.stringify(input.shape)} of input '${name}' (${datatype}) is ${bytes} bytes, more than the ${maxTensor} bytes allowed`];
    }
    return null;
}

// Request-level parameters Triton reads with a fixed JSON type (HTTPAPIServer::
// ParseJsonTritonParams); [rule, message] or null.
function checkRequestParameters(params) {
    if (params === undefined) {
        return null;
    }
    if (!isObject(params)) {
        return ['parameters_type', "'parameters' must be an object"];
    }
    const kinds = {
        sequence_start: 'bool', sequence_end: 'bool', binary_data_output: 'bool',
        priority: 'uint', timeout: 'uint',
    };
    for (const key in kinds) {
        if (key in params) {
            const v = params[key];
            const ok = kinds[key] === 'bool' ? typeof v === 'boolean' : isUint(v);
            if (!ok) {
                return ['parameter_type', `Unable to parse '${key}': expected ${kinds[key] === 'bool' ? 'a boolean' : 'an unsigned integer'}`];
            }
        }
    }
    if ('sequence_id' in params && !isUint(params.sequence_id) && typeof params.sequence_id !== 'string') {
        return ['parameter_type', "Unable to parse 'sequence_id': expected an unsigned integer or a string"];
    }
    return null;
}

// Requested outputs; returns { error } or { classified: [names] } (class_count > 0).
function checkOutputs(outputs) {
    const classified = [];
    if (outputs === undefined) {
        return { classified: classified };
    }
    if (!Array.isArray(outputs)) {
        return { error: ['outputs_type', "Unable to parse 'outputs': expected an array"] };
    }
    for (let i = 0; i < outputs.length; i++) {
        const output = outputs[i];
        if (!isObject(output) || typeof output.name !== 'string') {
            return { error: ['output_name', "Unable to parse 'name' of an output: expected a string"] };
        }
        const params = output.parameters;
        if (params === undefined) {
            continue;
        }
        if (!isObject(params)) {
            return { error: ['parameters_type', `'parameters' of output '${output.name}' must be an object`] };
        }
        if ('binary_data' in params && typeof params.binary_data !== 'boolean') {
            return { error: ['parameter_type', `Unable to set 'binary_data' of output '${output.name}': expected a boolean`] };
        }
        if ('classification' in params) {
            if (!isUint(params.classification)) {
                return { error: ['classification_type', `Unable to set 'classification' of output '${output.name}': expected an unsigned integer`] };
            }
            if (params.classification > 0) {
                classified.push(output.name);
            }
        }
    }
    return { classified: classified };
}

// Whether every input's shape has two dimensions or more and 0 rows: a batch of nothing,
// which Triton 2.51 answers with "input byte size mismatch ... Expected <one row>, got 0" (the
// words of a client that sent the wrong dtype). A one-dimensional input may be empty (a user
// with no history yet), and a request of such inputs goes on.
function emptyBatch(inputs) {
    if (inputs.length === 0) {
        return false;
    }
    for (let i = 0; i < inputs.length; i++) {
        const shape = inputs[i].shape;
        if (shape.length < 2 || shape[0] !== 0) {
            return false;
        }
    }
    return true;
}

// The infer request's checks; [rule, message] or { classified }.
function checkInferRequest(r, request, jsonBytes, bodyBytes, headerGiven) {
    if (!isObject(request)) {
        return { error: ['json_type', 'the request JSON must be an object'] };
    }
    if (!Array.isArray(request.inputs)) {
        return { error: ['inputs_type', "Unable to parse 'inputs': expected an array"] };
    }
    const totals = { binary: 0 };
    for (let i = 0; i < request.inputs.length; i++) {
        const error = checkInput(r, request.inputs[i], jsonBytes, totals);
        if (error) {
            return { error: error };
        }
    }
    if (emptyBatch(request.inputs)) {
        const shape = JSON.stringify(request.inputs[0].shape);
        return { error: ['empty_batch', `the request is an empty batch: every input has 0 rows (shape ${shape}); send at least one row`] };
    }
    if (totals.binary > 0 && !headerGiven) {
        return { error: ['binary_header', "inputs with 'binary_data_size' need the Inference-Header-Content-Length header"] };
    }
    if (headerGiven && totals.binary !== bodyBytes - jsonBytes) {
        return { error: ['binary_size_sum', `the inputs' binary_data_size add up to ${totals.binary} bytes, the request carries ${bodyBytes - jsonBytes} bytes after its JSON header`] };
    }
    const paramError = checkRequestParameters(request.parameters);
    if (paramError) {
        return { error: paramError };
    }
    return checkOutputs(request.outputs);
}

// The queue timeout (µs) a caller's Triton-Timeout-Ms header (ms) asks for: the lowest of
// its own `timeout` parameter (absent or 0: none), the header and $guard_max_timeout_us, so
// that Triton drops a request nobody waits for from its queues instead of running it (Triton
// applies a request's timeout where the model's queue policy has allow_timeout_override, and
// only when it is lower than the policy's default). Without the header the request goes on
// unchanged: no queue's default timeout is longer than $guard_max_timeout_us
// (tests/server/test_http_guard_deadlines.py reads them from the configs), so a timeout the
// guard would set could not lower it, and rewriting the body of every request cost the guard
// 8 % of its throughput.
// { error: [rule, message] } for a bad header; else { timeoutUs, own, lowered } (own: the
// request's; lowered: the header asks for less than it, so the body must carry timeoutUs).
function queueTimeout(r, params) {
    const headers = sameHeaders(r, 'Triton-Timeout-Ms');
    if (headers.length > 1) {
        return { error: ['timeout_header', 'Triton-Timeout-Ms is given more than once'] };
    }
    const own = isObject(params) && isUint(params.timeout) && params.timeout > 0 ? params.timeout : 0;
    if (headers.length === 0) {
        return { timeoutUs: own, own: own, lowered: false };
    }
    const value = headers[0][1].trim();
    if (!/^[0-9]{1,9}$/.test(value) || Number(value) === 0) {
        return { error: ['timeout_header', `Triton-Timeout-Ms must be a whole number of milliseconds from 1 to ${MAX_HEADER_MS}, got: ${value}`] };
    }
    const cap = setting(r, 'guard_max_timeout_us', 600000000);
    const wanted = Math.min(cap, Number(value) * 1000);
    const timeoutUs = own ? Math.min(own, wanted) : wanted;
    return { timeoutUs: timeoutUs, own: own, lowered: timeoutUs !== own };
}

// The request body with `timeout` = timeoutUs, or null when it cannot be rewritten exactly
// (the request then goes on unchanged). A "parameters" object is written first in the request
// JSON: Triton's parser reads the first of two equal keys (rapidjson FindMember), so a
// "parameters" further on is not read, and its fields are copied into the new one. Only that
// object is serialized again; the rest of the body (inputs, binary data) is copied byte for
// byte. Returns { body, jsonBytes } (jsonBytes: the new JSON's length).
function withTimeout(body, text, jsonBytes, parsed, timeoutUs) {
    const request = parsed.value;
    const brace = text.indexOf('{');  // only JSON whitespace (one byte a character) before it
    let params = { timeout: timeoutUs };
    if (request.parameters !== undefined) {
        if (parsed.approximated) {
            return null;  // NaN/Infinity were read as 0: the parameters cannot be copied
        }
        params = Object.assign({}, request.parameters, { timeout: timeoutUs });
        for (const key in params) {
            const v = params[key];
            // Integers past 2^53 would be rounded; objects and arrays Triton refuses itself.
            if ((typeof v === 'number' && !Number.isSafeInteger(v) && Number.isInteger(v))
                || (v !== null && typeof v === 'object')) {
                return null;
            }
        }
    }
    const head = Buffer.from('{"parameters":' + JSON.stringify(params) + ',');
    return {
        body: Buffer.concat([head, body.slice(brace + 1)]),
        jsonBytes: jsonBytes - (brace + 1) + head.length,
    };
}

// class_count on an output whose datatype is BYTES divides by zero in Triton 2.51
// (TopkClassifications): ask the model's metadata for the outputs' datatypes first.
async function checkClassified(r, model, version, names, rewrite) {
    const raw = r.variables.request_uri.split('?')[0];
    if (raw !== r.uri || !SAFE_NAME.test(model)) {
        refuse(r, 'classification_unverifiable', 'classification needs a plain path and a model name of letters, digits, _ . -');
        return;
    }
    const path = `/_guard/metadata/${model}` + (version ? `/versions/${version}` : '');
    const reply = await r.subrequest(path, { method: 'GET' });
    let metadata;
    try {
        metadata = JSON.parse(reply.responseText);
    } catch (e) {
        metadata = null;
    }
    if (reply.status !== 200 || !isObject(metadata) || !Array.isArray(metadata.outputs)) {
        const why = isObject(metadata) && metadata.error ? metadata.error : `status ${reply.status}`;
        refuse(r, 'classification_unverifiable', `cannot read the output datatypes of model '${model}': ${why}`);
        return;
    }
    for (let i = 0; i < names.length; i++) {
        const found = metadata.outputs.filter((o) => isObject(o) && o.name === names[i]);
        if (found.length !== 1) {
            refuse(r, 'classification_output', `unexpected inference output '${names[i]}' for model '${model}'`);
            return;
        }
        const datatype = found[0].datatype;
        if (typeof datatype !== 'string' || datatype === 'BYTES' || !(datatype in DTYPE_SIZE)) {
            refuse(r, 'classification_bytes', `class result not available for output '${names[i]}' due to unsupported type '${datatype}'`);
            return;
        }
    }
    pass(r, rewrite);
}

function infer(r) {
    if (r.method !== 'POST') {
        return pass(r);
    }
    const read = readBody(r);
    if (read.error) {
        return refuse(r, read.error[0], read.error[1], 413);
    }
    const body = read.body;
    const bodyBytes = body ? body.length : 0;
    const headers = sameHeaders(r, 'Inference-Header-Content-Length');
    let jsonBytes = bodyBytes;
    if (headers.length > 1) {
        return refuse(r, 'header_length', 'Inference-Header-Content-Length is given more than once');
    }
    if (headers.length === 1) {
        const value = headers[0][1].trim();
        if (!/^[0-9]{1,12}$/.test(value) || Number(value) > bodyBytes) {
            return refuse(r, 'header_length', `inference header size should be in range (0, ${bodyBytes}), got: ${value}`);
        }
        jsonBytes = Number(value);
        if (jsonBytes === 0) {
            return pass(r);  // a raw binary request: the whole body is the model's one input
        }
    }
    if (bodyBytes === 0) {
        return pass(r);  // Triton answers an empty request itself
    }
    const json = jsonText(r, body, jsonBytes);
    if (json.error) {
        return refuse(r, json.error[0], json.error[1], 413);
    }
    const parsed = parseJson(r, json.text);
    if (parsed.error) {
        return refuse(r, parsed.error[0], parsed.error[1]);
    }
    const route = INFER_PATH.exec(r.uri);
    if (route && route[3] !== 'infer') {
        return isObject(parsed.value) ? pass(r) : refuse(r, 'json_type', 'the request JSON must be an object');
    }
    const checked = checkInferRequest(r, parsed.value, jsonBytes, bodyBytes, headers.length === 1);
    if (checked.error) {
        return refuse(r, checked.error[0], checked.error[1]);
    }
    const deadline = queueTimeout(r, parsed.value.parameters);
    if (deadline.error) {
        return refuse(r, deadline.error[0], deadline.error[1]);
    }
    let rewrite = null;
    if (deadline.lowered) {
        rewrite = withTimeout(body, json.text, jsonBytes, parsed, deadline.timeoutUs);
        if (rewrite) {
            rewrite.headerGiven = headers.length === 1;
        }
    }
    if (checked.classified.length === 0) {
        return pass(r, rewrite);
    }
    if (!route) {
        return refuse(r, 'classification_unverifiable', 'classification needs a path /v2/models/<model>[/versions/<version>]/infer');
    }
    checkClassified(r, route[1], route[2], checked.classified, rewrite)
        .catch((e) => refuse(r, 'classification_unverifiable', `cannot read the output datatypes: ${e.message}`));
}

function jsonBody(r) {
    const read = readBody(r);
    if (read.error) {
        return refuse(r, read.error[0], read.error[1], 413);
    }
    const body = read.body;
    if (body && body.length > 0) {
        const json = jsonText(r, body, body.length);
        if (json.error) {
            return refuse(r, json.error[0], json.error[1], 413);
        }
        const parsed = parseJson(r, json.text);
        if (parsed.error) {
            return refuse(r, parsed.error[0], parsed.error[1]);
        }
    }
    return pass(r);
}

// The repository key the server was started with: $TRITONREPO_REPOSITORY_KEY, or the first
// line of the file $TRITONREPO_REPOSITORY_KEY_FILE names (nginx passes both on through its
// `env` directives); null when neither is set (a server without a key), '' when the file
// cannot be read (no request holds that key).
function repositoryKey() {
    const env = process.env;
    if (env.TRITONREPO_REPOSITORY_KEY) {
        return env.TRITONREPO_REPOSITORY_KEY.trim();
    }
    if (env.TRITONREPO_REPOSITORY_KEY_FILE) {
        try {
            return fs.readFileSync(env.TRITONREPO_REPOSITORY_KEY_FILE, 'utf8').split('\n')[0].trim();
        } catch (e) {
            return '';
        }
    }
    return null;
}

// "1" when the x-model-repository-key header equals the server's key (compared in time that
// does not depend on where they differ), else "0" (also when the server has no key, or its key
// file cannot be read). Evaluated before the body is read, so a large body is only read for a
// key holder.
function keyed(r) {
    const key = repositoryKey();
    const given = r.headersIn['x-model-repository-key'] || '';
    if (!key || given.length !== key.length) {
        return '0';
    }
    let diff = 0;
    for (let i = 0; i < key.length; i++) {
        diff |= key.charCodeAt(i) ^ given.charCodeAt(i);
    }
    return diff === 0 ? '1' : '0';
}

// "1" when the request may change the guard's routes: it holds the key, or the server was
// started without one (--no-repository-key leaves Triton's admin APIs open to every caller,
// and the guard's with them). A key file that cannot be read locks them. Large repository
// loads still need the key itself (keyed): without it they keep the guard's JSON checks.
function unlocked(r) {
    return repositoryKey() === null ? '1' : keyed(r);
}

export default { infer, jsonBody, keyed, unlocked };
