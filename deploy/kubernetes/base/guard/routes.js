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

// An output's rows: one per item of the batch dim (the first of two dims or more), or the
// whole output as one row (a one-dimensional output: a ranked list of ids, say).
function rows(output) {
    const shape = Array.isArray(output.shape) ? output.shape : [];
    const count = shape.length > 1 ? shape[0] : 1;
    const width = count > 0 ? Math.floor(output.data.length / count) : 0;
    const out = [];
    for (let i = 0; i < count; i++) {
        out.push(output.data.slice(i * width, (i + 1) * width));
    }
    return out;
}

function cosine(a, b) {
    let dot = 0;
    let na = 0;
    let nb = 0;
    for (let j = 0; j < a.length; j++) {
        dot += a[j] * b[j];
        na += a[j] * a[j];
        nb += b[j] * b[j];
    }
    return na > 0 && nb > 0 ? dot / Math.sqrt(na * nb) : (na === nb ? 1 : 0);
}

function argmax(row) {
    let best = 0;
    for (let j = 1; j < row.length; j++) {
        if (row[j] > row[best]) {
            best = j;
        }
    }
    return best;
}

// One row's score of `measure` (docs/operations/canary.md, the measures): cosine (1 = same
// direction), overlap (|A ∩ B| / max(|A|, |B|) of the ids), exact (1 when every value is
// equal), abs_diff (the largest |a - b|), argmax (1 when the largest value is at the same
// place), decision (1 when each value is on the same side of `threshold`).
const MEASURES = {
    cosine: (a, b) => cosine(a, b),
    overlap: (a, b) => {
        const seen = {};
        for (let i = 0; i < a.length; i++) {
            seen[String(a[i])] = true;
        }
        const common = b.filter((v) => seen[String(v)] === true).length;
        return common / Math.max(a.length, b.length, 1);
    },
    exact: (a, b) => (JSON.stringify(a) === JSON.stringify(b) ? 1 : 0),
    abs_diff: (a, b) => {
        let worst = 0;
        for (let j = 0; j < a.length; j++) {
            worst = Math.max(worst, Math.abs(a[j] - b[j]));
        }
        return worst;
    },
    argmax: (a, b) => (argmax(a) === argmax(b) ? 1 : 0),
    decision: (a, b, spec) => {
        const at = typeof spec.threshold === 'number' ? spec.threshold : 0.5;
        for (let j = 0; j < a.length; j++) {
            if ((a[j] >= at) !== (b[j] >= at)) {
                return 0;
            }
        }
        return 1;
    },
};

// The specs a route compares: its `agreement` (one {output, measure} or a list of them).
function specsOf(route) {
    const declared = route.agreement;
    if (!declared) {
        return [];
    }
    return Array.isArray(declared) ? declared : [declared];
}

function specKey(spec) {
    return `${spec.output}:${spec.measure}`;
}

// The per-row scores of each spec on two answers: {"<output>:<measure>": [score per row]}; an
// output missing from either answer, or of another shape, scores 0 (exact, argmax, decision,
// overlap, cosine) or Infinity (abs_diff) on every row of the serving answer.
function scores(specs, stable, canary) {
    const out = {};
    for (let i = 0; i < specs.length; i++) {
        const spec = specs[i];
        const measure = MEASURES[spec.measure];
        const a = outputOf(stable, spec.output);
        const b = outputOf(canary, spec.output);
        if (!measure || !a || !Array.isArray(a.data)) {
            continue;
        }
        const left = rows(a);
        const worst = spec.measure === 'abs_diff' ? Infinity : 0;
        if (!b || !Array.isArray(b.data) || JSON.stringify(a.shape) !== JSON.stringify(b.shape)) {
            out[specKey(spec)] = left.map(() => worst);
            continue;
        }
        const right = rows(b);
        out[specKey(spec)] = left.map((row, k) => {
            const value = measure(row, right[k], spec);
            return Number.isFinite(value) ? value : worst;
        });
    }
    return out;
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
    // Every output of the pipeline, whichever the caller asked for: each is compared.
    delete header.outputs;
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
// line logged holds both latencies (ms), both outcomes and each measure's score per row of the
// answers. Nobody waits on it.
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
        const specs = specsOf(route);
        const compared = stable.ok && canary.ok && specs.length > 0
            ? scores(specs, stable.answer, canary.answer) : null;
        const line = {
            t: Date.now() / 1000, model: model, canary: route.canary,
            stable_ok: stable.ok, canary_ok: canary.ok, stable_ms: stable.ms, canary_ms: canary.ms,
            scores: compared,
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

// Quantiles of per-row scores (sorted): what the canary judges (a share of rows, or a quantile
// of them, not the single worst row).
const QUANTILES = { p01: 0.01, p05: 0.05, p10: 0.10, p50: 0.5, p90: 0.90, p95: 0.95, p99: 0.99 };

function distribution(values) {
    const sorted = values.slice().sort((x, y) => x - y);
    const out = { rows: sorted.length, mean: null, min: null, max: null };
    if (!sorted.length) {
        return out;
    }
    out.mean = sorted.reduce((x, y) => x + y, 0) / sorted.length;
    out.min = sorted[0];
    out.max = sorted[sorted.length - 1];
    for (const name in QUANTILES) {
        out[name] = quantile(sorted, QUANTILES[name]);
    }
    return out;
}

// The comparison of `model` with its canary since `since` (epoch seconds): requests compared,
// failures of each, latency quantiles of each (ms), and for each compared measure the
// distribution of its per-row scores (`measures`: {"<output>:<measure>": {rows, mean, min, max,
// p01 ... p99}}).
function summary(r, model, since) {
    const lines = readLines(siblings(r, 'shadow.jsonl')).filter((l) => l.model === model && l.t >= since);
    const ms = (key) => lines.map((l) => l[key]).sort((x, y) => x - y);
    const stable = ms('stable_ms');
    const canary = ms('canary_ms');
    const perRow = {};
    for (let i = 0; i < lines.length; i++) {
        const s = lines[i].scores;
        if (s && typeof s === 'object') {
            for (const key in s) {
                perRow[key] = (perRow[key] || []).concat(s[key]);
            }
        }
    }
    const measures = {};
    for (const key in perRow) {
        measures[key] = distribution(perRow[key]);
    }
    const out = {
        model: model,
        canary: lines.length ? lines[lines.length - 1].canary : null,
        compared: lines.length,
        stable_failed: lines.filter((l) => !l.stable_ok).length,
        canary_failed: lines.filter((l) => !l.canary_ok).length,
        measures: measures,
    };
    for (const name in QUANTILES) {
        if (name === 'p50' || name === 'p90' || name === 'p95' || name === 'p99') {
            out[`stable_${name}_ms`] = quantile(stable, QUANTILES[name]);
            out[`canary_${name}_ms`] = quantile(canary, QUANTILES[name]);
        }
    }
    return out;
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
    const declared = value.agreement;
    if (declared !== undefined && declared !== null) {
        const specs = Array.isArray(declared) ? declared : [declared];
        const names = Object.keys(MEASURES).join(' | ');
        for (let i = 0; i < specs.length; i++) {
            const spec = specs[i];
            if (!spec || typeof spec !== 'object' || typeof spec.output !== 'string'
                || !Object.prototype.hasOwnProperty.call(MEASURES, spec.measure)
                || (spec.threshold !== undefined && typeof spec.threshold !== 'number')) {
                return `'agreement' must be {"output": name, "measure": ${names}} or a list of them`;
            }
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
    const measured = {};
    const lines = readLines(siblings(r, 'shadow.jsonl'));
    for (let i = 0; i < lines.length; i++) {
        const l = lines[i];
        const key = `${l.model}\u0000${l.canary}`;
        const c = compared[key] || (compared[key] = { model: l.model, canary: l.canary, n: 0, failed: 0 });
        c.n += 1;
        c.failed += l.canary_ok ? 0 : 1;
        const s = l.scores && typeof l.scores === 'object' ? l.scores : {};
        for (const name in s) {
            const cut = name.lastIndexOf(':');
            const mkey = `${key}\u0000${name}`;
            const m = measured[mkey] || (measured[mkey] = { model: l.model, canary: l.canary,
                output: name.slice(0, cut), measure: name.slice(cut + 1), rows: 0, sum: 0 });
            for (let k = 0; k < s[name].length; k++) {
                if (Number.isFinite(s[name][k])) {
                    m.rows += 1;
                    m.sum += s[name][k];
                }
            }
        }
    }
    out.push('# HELP tritonrepo_shadow_compared_total Requests answered by a model and its canary and compared.');
    out.push('# TYPE tritonrepo_shadow_compared_total counter');
    out.push('# HELP tritonrepo_shadow_canary_failed_total Compared requests the canary failed.');
    out.push('# TYPE tritonrepo_shadow_canary_failed_total counter');
    const pairs = Object.keys(compared);
    for (let i = 0; i < pairs.length; i++) {
        const c = compared[pairs[i]];
        const l = labels({ model: c.model, canary: c.canary });
        out.push(`tritonrepo_shadow_compared_total${l} ${c.n}`);
        out.push(`tritonrepo_shadow_canary_failed_total${l} ${c.failed}`);
    }
    out.push('# HELP tritonrepo_shadow_rows_total Answer rows compared, per output and measure.');
    out.push('# TYPE tritonrepo_shadow_rows_total counter');
    out.push('# HELP tritonrepo_shadow_score_sum Sum of the compared rows\' scores (cosine, overlap, exact, abs_diff, argmax, decision), per output and measure.');
    out.push('# TYPE tritonrepo_shadow_score_sum counter');
    const scored = Object.keys(measured);
    for (let i = 0; i < scored.length; i++) {
        const m = measured[scored[i]];
        const l = labels({ model: m.model, canary: m.canary, output: m.output, measure: m.measure });
        out.push(`tritonrepo_shadow_rows_total${l} ${m.rows}`);
        out.push(`tritonrepo_shadow_score_sum${l} ${m.sum}`);
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
