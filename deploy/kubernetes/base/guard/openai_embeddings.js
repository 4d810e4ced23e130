// OpenAI's POST /v1/embeddings in front of Triton's KServe v2 endpoint (nginx njs, 0.7.9 and
// later), for the pipelines whose served config declares it: the parameter
// tritonrepo_openai_embeddings, JSON {"input", "output", "tokens", "dimensions"} (a description's
// [openai_embeddings] table; docs/operations/openai_embeddings.md).
//
// nginx.conf.template routes POST /v1/embeddings here. One request of n texts becomes
// ceil(n / max_batch_size) KServe v2 requests to the model (one, for n up to the model's
// max_batch_size: Triton batches it as one request), sent at once through the internal
// locations /_guard/openai_config/ and /_guard/openai_infer/. The answer follows OpenAI's
// embeddings API (https://platform.openai.com/docs/api-reference/embeddings): input a string or
// a list of strings, encoding_format "float" (default) or "base64" (little-endian FP32 bytes),
// dimensions accepted only when it equals the model's, usage from the pipeline's token-count
// output, and errors as {"error": {"message", "type", "param", "code"}}.

const PARAMETER = 'tritonrepo_openai_embeddings';
const MAX_INPUTS = 2048;  // OpenAI's limit of inputs per request
const SAFE_NAME = /^[A-Za-z0-9_.\-]+$/;
const KNOWN_FIELDS = { input: 1, model: 1, encoding_format: 1, dimensions: 1, user: 1 };

// An OpenAI error answer; `rule` is logged as the guard's refusals are ($guard_rule).
function fail(r, status, message, param, code) {
    r.variables.guard_rule = 'openai_' + (code || 'invalid_request');
    if (status >= 400 && status < 500) {
        r.warn(`http guard refused ${r.method} ${r.uri} (openai): ${message}`);
    } else {
        r.error(`http guard: ${r.uri}: ${message}`);
    }
    const type = status >= 500 ? 'server_error' : 'invalid_request_error';
    r.headersOut['Content-Type'] = 'application/json';
    r.return(status, JSON.stringify({
        error: { message: message, type: type, param: param || null, code: code || null },
    }));
}

// The request's texts, or {error: [message, param]}.
function texts(body) {
    const input = body.input;
    const list = typeof input === 'string' ? [input] : input;
    if (!Array.isArray(list) || list.length === 0) {
        return { error: ["'input' must be a non-empty string or a non-empty list of strings", 'input'] };
    }
    if (list.length > MAX_INPUTS) {
        return { error: [`'input' has ${list.length} items; at most ${MAX_INPUTS} per request`, 'input'] };
    }
    for (let i = 0; i < list.length; i++) {
        if (typeof list[i] !== 'string') {
            return { error: ['token arrays are not supported: send each input as text', 'input'] };
        }
        if (list[i].length === 0) {
            return { error: [`'input[${i}]' is empty; send text`, 'input'] };
        }
    }
    return { texts: list };
}

// The declared embedding spec and max_batch_size of `model`, or {status, error: [message, code]}.
async function embeddingSpec(r, model) {
    const reply = await r.subrequest(`/_guard/openai_config/${model}/config`, { method: 'GET' });
    let config = null;
    try {
        config = JSON.parse(reply.responseText);
    } catch (e) {
        config = null;
    }
    if (reply.status === 400 || reply.status === 404) {
        return { status: 404, error: [`The model '${model}' does not exist or is not loaded`, 'model_not_found'] };
    }
    if (reply.status !== 200 || config === null || typeof config !== 'object') {
        return { status: 503, error: [`cannot read the config of model '${model}' (status ${reply.status})`, 'service_unavailable'] };
    }
    const declared = config.parameters && config.parameters[PARAMETER];
    let spec = null;
    try {
        spec = JSON.parse(declared.string_value);
    } catch (e) {
        spec = null;
    }
    if (spec === null || typeof spec !== 'object' || !spec.input || !spec.output) {
        return { status: 400, error: [`The model '${model}' is not an embedding model: its config declares no ${PARAMETER}`, 'model_not_embeddings'] };
    }
    spec.maxBatch = Number(config.max_batch_size) > 0 ? Number(config.max_batch_size) : 1;
    return { spec: spec };
}

// One KServe v2 request for `part` (a list of texts); resolves to the parsed answer, or rejects
// with {status, message}.
async function inferPart(r, model, spec, part) {
    const outputs = [{ name: spec.output }];
    if (spec.tokens) {
        outputs.push({ name: spec.tokens });
    }
    const request = {
        inputs: [{ name: spec.input, datatype: 'BYTES', shape: [part.length, 1], data: part }],
        outputs: outputs,
    };
    const reply = await r.subrequest(`/_guard/openai_infer/${model}/infer`,
        { method: 'POST', body: JSON.stringify(request) });
    let answer = null;
    try {
        answer = JSON.parse(reply.responseText);
    } catch (e) {
        answer = null;
    }
    if (reply.status !== 200 || answer === null || !Array.isArray(answer.outputs)) {
        const message = answer && answer.error ? answer.error : `status ${reply.status}`;
        throw { status: reply.status === 400 ? 400 : 503, message: message };
    }
    return answer;
}

function outputData(answer, name) {
    for (let i = 0; i < answer.outputs.length; i++) {
        if (answer.outputs[i].name === name) {
            return answer.outputs[i].data;
        }
    }
    return null;
}

function base64Row(values, start, width) {
    const row = new Float32Array(width);
    for (let j = 0; j < width; j++) {
        row[j] = values[start + j];
    }
    return Buffer.from(row.buffer).toString('base64');
}

async function answer(r, body, model, list) {
    const found = await embeddingSpec(r, model);
    if (found.error) {
        return fail(r, found.status, found.error[0], 'model', found.error[1]);
    }
    const spec = found.spec;
    const width = Number(spec.dimensions);
    if (body.dimensions !== undefined && body.dimensions !== null && body.dimensions !== width) {
        return fail(r, 400, `This model does not support specifying dimensions: its embeddings have ${width}`, 'dimensions', 'unsupported_dimensions');
    }
    const parts = [];
    for (let start = 0; start < list.length; start += spec.maxBatch) {
        parts.push(inferPart(r, model, spec, list.slice(start, start + spec.maxBatch)));
    }
    let answers;
    try {
        answers = await Promise.all(parts);
    } catch (e) {
        return fail(r, e.status || 503, `model '${model}': ${e.message || e}`, 'input', e.status === 400 ? 'invalid_input' : 'inference_failed');
    }
    const base64 = body.encoding_format === 'base64';
    const data = [];
    let tokens = 0;
    for (let p = 0; p < answers.length; p++) {
        const values = outputData(answers[p], spec.output);
        const counts = spec.tokens ? outputData(answers[p], spec.tokens) : null;
        const rows = values ? values.length / width : 0;
        if (!values || rows !== Math.min(spec.maxBatch, list.length - p * spec.maxBatch)) {
            return fail(r, 500, `model '${model}' answered ${values ? values.length : 0} values for ${width}-dimensional embeddings`, null, 'bad_model_answer');
        }
        for (let i = 0; i < rows; i++) {
            const embedding = base64 ? base64Row(values, i * width, width) : values.slice(i * width, (i + 1) * width);
            data.push({ object: 'embedding', index: data.length, embedding: embedding });
            tokens += counts ? Number(counts[i]) : 0;
        }
    }
    r.headersOut['Content-Type'] = 'application/json';
    r.return(200, JSON.stringify({
        object: 'list',
        data: data,
        model: model,
        usage: { prompt_tokens: tokens, total_tokens: tokens },
    }));
}

function embeddings(r) {
    if (r.method !== 'POST') {
        return fail(r, 405, `${r.method} is not supported: send POST /v1/embeddings`, null, 'method_not_allowed');
    }
    let body;
    try {
        body = JSON.parse(r.requestText || '');
    } catch (e) {
        return fail(r, 400, `the request body is not JSON (${e.message})`, null, 'invalid_json');
    }
    if (body === null || typeof body !== 'object' || Array.isArray(body)) {
        return fail(r, 400, 'the request body must be a JSON object', null, 'invalid_json');
    }
    const fields = Object.keys(body);
    for (let i = 0; i < fields.length; i++) {
        if (!KNOWN_FIELDS[fields[i]]) {
            return fail(r, 400, `Unrecognized request argument supplied: ${fields[i]}`, fields[i], 'unknown_argument');
        }
    }
    if (typeof body.model !== 'string' || !SAFE_NAME.test(body.model)) {
        return fail(r, 400, "'model' must name a served model (letters, digits, _ . -)", 'model', 'invalid_model');
    }
    // null stands for "not given", as OpenAI's API takes it.
    const format = body.encoding_format === null ? undefined : body.encoding_format;
    if (format !== undefined && format !== 'float' && format !== 'base64') {
        return fail(r, 400, "'encoding_format' must be 'float' or 'base64'", 'encoding_format', 'invalid_encoding_format');
    }
    const dims = body.dimensions === null ? undefined : body.dimensions;
    if (dims !== undefined && !(typeof dims === 'number' && Number.isInteger(dims) && dims > 0)) {
        return fail(r, 400, "'dimensions' must be a positive integer", 'dimensions', 'invalid_dimensions');
    }
    const read = texts(body);
    if (read.error) {
        return fail(r, 400, read.error[0], read.error[1], 'invalid_input');
    }
    answer(r, body, body.model, read.texts)
        .catch((e) => fail(r, 500, `the guard failed to answer: ${e.message || e}`, null, 'guard_error'));
}

export default { embeddings };
