// Canary and shadow routes of the HTTP guard (nginx njs, 0.7.9 and later): a share of a
// model's inference requests goes to another model (the canary), a share is copied to it and
// its answers compared with the served model's, and what was decided is kept
// (docs/operations/canary.md).
//
// State lives in files of the guard's run directory (njs 0.7.9 has no shared memory between
// nginx workers): $guard_routes_file (JSON, one entry per routed model), and beside it
// shadow.jsonl (one line per compared request) and decisions.jsonl (one line per decision).
// The routes file exists only while a route does: nginx itself tests for it ($guard_routed, a
// stat in the server's rewrite phase), and only then does choose() read it. A guard without
// routes runs no routing code on a request: reading a missing file throws, and an exception
// costs njs 0.7.9 about 0.5 ms, a fifth of the guard's throughput on 2 cores.
//
// nginx.conf.template routes here:
//   choose(r)    from kserve_guard.js, for POST /v2/models/<m>/infer (no version in the path)
//   shadow(r)    the mirror subrequest of a request chosen for shadowing (location
//                /_guard/shadow): both models answer it, the answers are compared and logged
//   admin(r)     /_guard/routes[/<m>] (GET; PUT and DELETE with the repository key, which
//                a server started without one does not ask for: kserve_guard.js unlocked),
//                /_guard/decisions/<m> (POST with the key), /_guard/shadow/<m> (GET: the
//                comparison's summary; DELETE with the key: start over)
//                /_guard/upstream (GET: {"metrics_port"}, Triton's metrics port on this host,
//                null when the guard was not told it)
//   metrics(r)   GET /_guard/metrics: Prometheus text of the above

import fs from 'fs';

const INFER = /^\/v2\/models\/([A-Za-z0-9_.\-]+)\/infer$/;
const SAFE_NAME = /^[A-Za-z0-9_.\-]{1,255}$/;
const MAX_WEIGHT = 50;  // percent of requests a canary may take; more is a promotion
const MEASURES = { cosine: 1, overlap: 1, exact: 1 };
const DECISIONS = { start: 1, step: 1, promote: 1, rollback: 1, report: 1 };

// A model name the routes may hold: SAFE_NAME, and not a name every object has already
// (`__proto__`, `constructor`: the routes are kept in a plain object).
function modelName(name) {
    return typeof name === 'string' && SAFE_NAME.test(name) && !(name in Object.prototype);
}

function siblings(r, name) {
    const file = r.variables.guard_routes_file;
    return file.slice(0, file.lastIndexOf('/') + 1) + name;
}

function readJson(path, fallback) {
    try {
        return JSON.parse(fs.readFileSync(path, 'utf8'));
    } catch (e) {
        return fallback;
    }
}

function readLines(path) {
    let text;
    try {
        text = fs.readFileSync(path, 'utf8');
    } catch (e) {
        return [];
    }
    const lines = [];
    const parts = text.split('\n');
    for (let i = 0; i < parts.length; i++) {
        if (parts[i]) {
            try {
                lines.push(JSON.parse(parts[i]));
            } catch (e) {
                // a line cut by a full disk: skipped
            }
        }
    }
    return lines;
}

// Write a file whole: a temporary file renamed over it, so a reader never sees half of it.
function writeWhole(path, text) {
    const temporary = `${path}.${process.pid}.tmp`;
    fs.writeFileSync(temporary, text);
    fs.renameSync(temporary, path);
}

function routes(r) {
    return readJson(r.variables.guard_routes_file, {});
}

// Keep `all` as the routes: the file rewritten whole, or removed when no route is left (so
// that nginx's $guard_routed is empty again and requests skip choose()).
function saveRoutes(r, all) {
    const file = r.variables.guard_routes_file;
    if (Object.keys(all).length > 0) {
        writeWhole(file, JSON.stringify(all));
        return;
    }
    try {
        fs.unlinkSync(file);
    } catch (e) {
        // already gone
    }
}

// Where an inference request goes: {kind: 'canary', uri} (the canary answers it),
// {kind: 'shadow', model, route} (the served model answers, and the canary is compared), or
// null (the served model answers; no route, a versioned path, or not drawn).
function choose(r) {
    if (r.variables.guard_routed !== '1') {
        return null;
    }
    const path = r.method === 'POST' ? INFER.exec(r.uri) : null;
    if (!path) {
        return null;
    }
    const route = routes(r)[path[1]];
    if (!route) {
        return null;
    }
    const draw = Math.random() * 100;
    if (draw < route.weight) {
        return { kind: 'canary', uri: `/v2/models/${route.canary}/infer` };
    }
    if (draw < route.weight + route.shadow) {
        return { kind: 'shadow', model: path[1], route: route };
    }
    return null;
}

// --- the comparison of two answers ---------------------------------------------------------
function outputOf(answer, name) {
    const outputs = answer && Array.isArray(answer.outputs) ? answer.outputs : [];
    return outputs.find((o) => o.name === name);
}

function rows(output) {
    const width = output.shape.length > 1 ? output.shape[output.shape.length - 1] : output.data.length;
    const out = [];
    for (let i = 0; i < output.data.length; i += width) {
        out.push(output.data.slice(i, i + width));
    }
    return out;
}

// The answers' agreement on the declared output: the smallest cosine of a row (cosine), the
// share of ids both answers list (overlap: |A ∩ B| / max(|A|, |B|)), or 1/0 for identical
// values (exact); null when the output is missing from either answer.
function agreement(spec, stable, canary) {
    const a = outputOf(stable, spec.output);
    const b = outputOf(canary, spec.output);
    if (!a || !b || !Array.isArray(a.data) || !Array.isArray(b.data)) {
        return null;
    }
    if (spec.measure === 'overlap') {
        const seen = {};
        for (let i = 0; i < a.data.length; i++) {
            seen[String(a.data[i])] = true;
        }
        const common = b.data.filter((v) => seen[String(v)] === true).length;
        return common / Math.max(a.data.length, b.data.length, 1);
    }
    if (spec.measure === 'exact') {
        return JSON.stringify(a.data) === JSON.stringify(b.data) ? 1 : 0;
    }
    const left = rows(a);
    const right = rows(b);
    if (left.length !== right.length) {
        return 0;
    }
    let smallest = 1;
    for (let i = 0; i < left.length; i++) {
        let dot = 0;
        let na = 0;
        let nb = 0;
        for (let j = 0; j < left[i].length; j++) {
            dot += left[i][j] * right[i][j];
            na += left[i][j] * left[i][j];
            nb += right[i][j] * right[i][j];
        }
        const cosine = na > 0 && nb > 0 ? dot / Math.sqrt(na * nb) : (na === nb ? 1 : 0);
        smallest = Math.min(smallest, cosine);
    }
    return smallest;
}

async function timed(r, model, body) {
    const start = Date.now();
    const reply = await r.subrequest(`/_guard/shadow_infer/${model}/infer`, { method: 'POST', body: body });
    const ms = Date.now() - start;
    let answer = null;
    try {
        answer = JSON.parse(reply.responseText);
    } catch (e) {
        answer = null;
    }
    return { ok: reply.status === 200, status: reply.status, ms: ms, answer: answer };
}

// The body the shadow comparison sends both models: the original request with every output
// asked for as JSON (the guard parses the answers), binary input data kept as it is. Returns
// {body, headerLength} ('' for a JSON body), or null when the request cannot be read.
function jsonAnswers(parent) {
    const body = parent.requestBuffer;
    if (!body || body.length === 0) {
        return null;
    }
    const given = parent.headersIn['Inference-Header-Content-Length'];
    const headerBytes = given === undefined ? body.length : Number(given);
    if (!(headerBytes > 0) || headerBytes > body.length) {
        return null;
    }
    const header = JSON.parse(body.slice(0, headerBytes).toString());
    header.parameters = header.parameters || {};
    header.parameters.binary_data_output = false;
    const outputs = Array.isArray(header.outputs) ? header.outputs : [];
    for (let i = 0; i < outputs.length; i++) {
        if (outputs[i].parameters) {
            outputs[i].parameters.binary_data = false;
        }
    }
    const text = JSON.stringify(header);
    if (given === undefined) {
        return { body: text, headerLength: '' };
    }
    return {
        body: Buffer.concat([Buffer.from(text), body.slice(headerBytes)]),
        headerLength: String(Buffer.byteLength(text)),
    };
}

// The mirror subrequest: the served model and the canary answer the same body, at once; the
// line logged holds both latencies (ms), both outcomes and the agreement. Nobody waits on it.
async function shadow(r) {
    const model = r.variables.guard_shadow_model;
    const route = model ? routes(r)[model] : null;
    if (!route) {
        r.return(204);
        return;
    }
    try {
        const request = jsonAnswers(r.parent || r);
        if (!request) {
            r.return(204);
            return;
        }
        r.variables.guard_shadow_header_length = request.headerLength;
        const pair = await Promise.all([timed(r, model, request.body), timed(r, route.canary, request.body)]);
        const stable = pair[0];
        const canary = pair[1];
        const agree = stable.ok && canary.ok && route.agreement
            ? agreement(route.agreement, stable.answer, canary.answer) : null;
        const line = {
            t: Date.now() / 1000, model: model, canary: route.canary,
            stable_ok: stable.ok, canary_ok: canary.ok, stable_ms: stable.ms, canary_ms: canary.ms,
            agreement: agree,
        };
        fs.appendFileSync(siblings(r, 'shadow.jsonl'), JSON.stringify(line) + '\n');
    } catch (e) {
        r.error(`http guard: shadow comparison of ${model} failed: ${e.message}`);
    }
    r.return(204);
}

// --- summaries -----------------------------------------------------------------------------
function quantile(sorted, q) {
    if (sorted.length === 0) {
        return null;
    }
    return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
}

// The comparison of `model` with its canary since `since` (epoch seconds): requests compared,
// failures of each, latency p50/p99 of each (ms), agreement mean and min.
function summary(r, model, since) {
    const lines = readLines(siblings(r, 'shadow.jsonl')).filter((l) => l.model === model && l.t >= since);
    const ms = (key) => lines.map((l) => l[key]).sort((x, y) => x - y);
    const agreements = lines.map((l) => l.agreement).filter((a) => typeof a === 'number');
    const stable = ms('stable_ms');
    const canary = ms('canary_ms');
    return {
        model: model,
        canary: lines.length ? lines[lines.length - 1].canary : null,
        compared: lines.length,
        stable_failed: lines.filter((l) => !l.stable_ok).length,
        canary_failed: lines.filter((l) => !l.canary_ok).length,
        stable_p50_ms: quantile(stable, 0.5),
        stable_p99_ms: quantile(stable, 0.99),
        canary_p50_ms: quantile(canary, 0.5),
        canary_p99_ms: quantile(canary, 0.99),
        agreement_mean: agreements.length ? agreements.reduce((x, y) => x + y, 0) / agreements.length : null,
        agreement_min: agreements.length ? Math.min.apply(null, agreements) : null,
        agreements: agreements.length,
    };
}

// --- the admin API -------------------------------------------------------------------------
function reply(r, status, value) {
    r.headersOut['Content-Type'] = 'application/json';
    r.return(status, JSON.stringify(value));
}

// The request body parsed, or undefined when it is not JSON.
function bodyJson(r) {
    try {
        return JSON.parse(r.requestText || '');
    } catch (e) {
        return undefined;
    }
}

function checkedRoute(model, value) {
    if (!value || typeof value !== 'object' || Array.isArray(value)) {
        return 'the body must be a JSON object: {"canary", "weight", "shadow", "agreement"}';
    }
    if (!modelName(value.canary) || value.canary === model) {
        return "'canary' must name another model";
    }
    const keys = ['weight', 'shadow'];
    for (let i = 0; i < keys.length; i++) {
        const key = keys[i];
        const v = value[key];
        if (typeof v !== 'number' || !(v >= 0) || v > 100) {
            return `'${key}' must be a percentage, 0 to 100`;
        }
    }
    if (value.weight > MAX_WEIGHT) {
        return `'weight' ${value.weight} is over ${MAX_WEIGHT} %: promote instead`;
    }
    if (value.weight + value.shadow > 100) {
        return "'weight' and 'shadow' together exceed 100 %";
    }
    const spec = value.agreement;
    if (spec !== undefined && spec !== null) {
        if (typeof spec !== 'object' || typeof spec.output !== 'string' || !MEASURES[spec.measure]) {
            return "'agreement' must be {\"output\": name, \"measure\": \"cosine\" | \"overlap\" | \"exact\"}";
        }
    }
    return null;
}

function admin(r) {
    const parts = r.uri.split('/').filter((p) => p);  // _guard, kind, [model]
    const kind = parts[1];
    const model = parts[2];
    if (parts.length > 3) {
        return reply(r, 404, { error: `http guard: no such path ${r.uri}: /_guard/${kind}[/<model>]` });
    }
    if (model !== undefined && !modelName(model)) {
        return reply(r, 400, { error: `http guard: '${model}' is not a model name` });
    }
    const writes = r.method !== 'GET';
    if (writes && r.variables.guard_unlocked !== '1') {
        return reply(r, 403, { error: 'http guard: changing routes needs the repository key (x-model-repository-key)' });
    }
    if (kind === 'upstream' && model === undefined && r.method === 'GET') {
        const port = Number(r.variables.guard_metrics_port);
        return reply(r, 200, { metrics_port: Number.isInteger(port) && port > 0 ? port : null });
    }
    if (kind === 'routes' && r.method === 'GET') {
        const all = routes(r);
        return reply(r, 200, model === undefined ? all : (all[model] || null));
    }
    if (kind === 'routes' && model !== undefined && r.method === 'PUT') {
        const value = bodyJson(r);
        if (value === undefined) {
            return reply(r, 400, { error: 'http guard: the body is not JSON' });
        }
        const problem = checkedRoute(model, value);
        if (problem) {
            return reply(r, 400, { error: `http guard: ${problem}` });
        }
        const all = routes(r);
        all[model] = { canary: value.canary, weight: value.weight, shadow: value.shadow, agreement: value.agreement || null };
        saveRoutes(r, all);
        return reply(r, 200, all[model]);
    }
    if (kind === 'routes' && model !== undefined && r.method === 'DELETE') {
        const all = routes(r);
        const had = all[model] || null;
        delete all[model];
        saveRoutes(r, all);
        return reply(r, 200, had);
    }
    if (kind === 'decisions' && model !== undefined && r.method === 'POST') {
        const value = bodyJson(r);
        if (value === undefined) {
            return reply(r, 400, { error: 'http guard: the body is not JSON' });
        }
        if (!value || !DECISIONS[value.decision] || typeof value.canary !== 'string') {
            return reply(r, 400, { error: 'http guard: a decision is {"decision": "start" | "step" | "promote" | "rollback" | "report", "canary": name, "reason": text}' });
        }
        const line = { t: Date.now() / 1000, model: model, canary: value.canary, decision: value.decision,
            weight: Number(value.weight) || 0, reason: String(value.reason || '') };
        fs.appendFileSync(siblings(r, 'decisions.jsonl'), JSON.stringify(line) + '\n');
        r.log(`http guard: canary ${line.decision} for ${model} (${line.canary}): ${line.reason}`);
        return reply(r, 200, line);
    }
    if (kind === 'decisions' && r.method === 'GET') {
        const lines = readLines(siblings(r, 'decisions.jsonl'));
        return reply(r, 200, model === undefined ? lines : lines.filter((l) => l.model === model));
    }
    if (kind === 'shadow' && model !== undefined && r.method === 'GET') {
        return reply(r, 200, summary(r, model, Number(r.args.since) || 0));
    }
    if (kind === 'shadow' && model !== undefined && r.method === 'DELETE') {
        const kept = readLines(siblings(r, 'shadow.jsonl')).filter((l) => l.model !== model);
        writeWhole(siblings(r, 'shadow.jsonl'), kept.map((l) => JSON.stringify(l) + '\n').join(''));
        return reply(r, 200, { model: model, cleared: true });
    }
    return reply(r, 405, { error: `http guard: ${r.method} ${r.uri} is not part of the routes API` });
}

// --- metrics -------------------------------------------------------------------------------
function labels(values) {
    return '{' + Object.keys(values).map((k) => `${k}="${String(values[k]).replace(/["\\\n]/g, '_')}"`).join(',') + '}';
}

function metrics(r) {
    const out = [];
    out.push('# HELP tritonrepo_canary_weight Share of a model\'s inference requests the guard sends to its canary, percent.');
    out.push('# TYPE tritonrepo_canary_weight gauge');
    out.push('# HELP tritonrepo_shadow_share Share of a model\'s inference requests the guard copies to its canary, percent.');
    out.push('# TYPE tritonrepo_shadow_share gauge');
    const all = routes(r);
    const models = Object.keys(all);
    for (let i = 0; i < models.length; i++) {
        const model = models[i];
        out.push(`tritonrepo_canary_weight${labels({ model: model, canary: all[model].canary })} ${all[model].weight}`);
        out.push(`tritonrepo_shadow_share${labels({ model: model, canary: all[model].canary })} ${all[model].shadow}`);
    }
    const compared = {};
    const lines = readLines(siblings(r, 'shadow.jsonl'));
    for (let i = 0; i < lines.length; i++) {
        const l = lines[i];
        const key = `${l.model}\u0000${l.canary}`;
        const c = compared[key] || (compared[key] = { model: l.model, canary: l.canary, n: 0, failed: 0, agreement: 0, agreed: 0 });
        c.n += 1;
        c.failed += l.canary_ok ? 0 : 1;
        if (typeof l.agreement === 'number') {
            c.agreement += l.agreement;
            c.agreed += 1;
        }
    }
    out.push('# HELP tritonrepo_shadow_compared_total Requests answered by a model and its canary and compared.');
    out.push('# TYPE tritonrepo_shadow_compared_total counter');
    out.push('# HELP tritonrepo_shadow_canary_failed_total Compared requests the canary failed.');
    out.push('# TYPE tritonrepo_shadow_canary_failed_total counter');
    out.push('# HELP tritonrepo_shadow_agreement_sum Sum of the compared answers\' agreement (cosine, overlap or exact).');
    out.push('# TYPE tritonrepo_shadow_agreement_sum counter');
    const pairs = Object.keys(compared);
    for (let i = 0; i < pairs.length; i++) {
        const c = compared[pairs[i]];
        const l = labels({ model: c.model, canary: c.canary });
        out.push(`tritonrepo_shadow_compared_total${l} ${c.n}`);
        out.push(`tritonrepo_shadow_canary_failed_total${l} ${c.failed}`);
        out.push(`tritonrepo_shadow_agreement_sum${l} ${c.agreement}`);
    }
    const decisions = {};
    const made = readLines(siblings(r, 'decisions.jsonl'));
    for (let i = 0; i < made.length; i++) {
        const d = made[i];
        const key = `${d.model}\u0000${d.canary}\u0000${d.decision}`;
        decisions[key] = (decisions[key] || 0) + 1;
    }
    out.push('# HELP tritonrepo_canary_decisions_total Decisions of canary rollouts (start, step, promote, rollback, report).');
    out.push('# TYPE tritonrepo_canary_decisions_total counter');
    const keys = Object.keys(decisions);
    for (let i = 0; i < keys.length; i++) {
        const part = keys[i].split('\u0000');
        out.push(`tritonrepo_canary_decisions_total${labels({ model: part[0], canary: part[1], decision: part[2] })} ${decisions[keys[i]]}`);
    }
    r.headersOut['Content-Type'] = 'text/plain; version=0.0.4';
    r.return(200, out.join('\n') + '\n');
}

export default { choose, shadow, admin, metrics };
