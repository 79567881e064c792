// File-based state (njs 0.7.9 has no shared dictionary: js_shared_dict_zone
// arrived in 0.8.0, and no JavaScript value survives a request).
//
//   STATE/meta.json          {"master", "backends": {"version", "generation"},
//                             "certificates": {"version", "generation"}}
//   STATE/b/<md5(name)>.json {"master", "generation", "backend", "ids", "hash"}
//   STATE/c/<host>.json      {"master", "generation", "host", "pair"}
//                            ("#default.json" holds the posted default)
//   STATE/p/<sha256>.json    {"master", "cert", "key"}
//   STATE/lock               writer mutex between workers (O_EXCL create)
//
// Every file is replaced atomically (write a temp file, rename it over the
// old one), so a reader sees the old or the new version, never a mix.
// Readers open exactly the file they need: a request reads its backend's
// file (plus the canary backend's when the canary is chosen), a TLS handshake
// reads one to three host records and the pair the first one found names.
// Nothing is cached (nothing can be), so a change is visible to the very next
// request in every worker.
//
// A certificate and its key are stored once, under the sha256 of their
// content ("pair"), however many hosts use them: hosts sharing a Secret (a
// wildcard, or one tenant's pair named by hundreds of hosts) cost one pair
// file and a small record each, and a POST writes a pair only when it is new.
// Pairs are written before the records that name them; a pair no record
// names any more is deleted by the POST that released it (under the lock).
// A handshake that read a record just before a rotation may then find its
// pair gone: it reads the record again (readCertPair).
//
// "master" is the nginx master pid (the workers' parent) that accepted the
// write. A file written under another master (state left over from before an
// nginx restart) is ignored, like the Lua shared dicts that start empty after
// a restart, and the first write under the new master deletes it.
import fs from 'fs';
import nodeCrypto from 'crypto';

var LOCK_STALE_MS = 30000;

function md5hex(s) {
    return nodeCrypto.createHash('md5').update(s).digest('hex');
}

function master() {
    return process.ppid;
}

function backendPath(dir, name) {
    return dir + '/b/' + md5hex(name) + '.json';
}

// host is validated (validate.host) or "#default"
function certPath(dir, host) {
    return dir + '/c/' + host + '.json';
}

var PAIR_NAME = /^[0-9a-f]{64}$/;

// The name of a pair's file. Both halves are hashed: a Secret re-keyed under
// the same certificate chain is a different pair.
function pairDigest(cert, key) {
    return nodeCrypto.createHash('sha256').update(cert).update('\0').update(key).digest('hex');
}

// digest is PAIR_NAME (checked by the callers: records are read from disk)
function pairPath(dir, digest) {
    return dir + '/p/' + digest + '.json';
}

// Returns the parsed file, null when it does not exist, or {stale: true}.
function readJSON(path) {
    var text;
    try {
        text = fs.readFileSync(path, 'utf8');
    } catch (e) {
        if (e.code === 'ENOENT') {
            return null;
        }
        throw e;
    }
    var rec = JSON.parse(text);
    if (rec.master !== master()) {
        return {stale: true};
    }
    return rec;
}

// Hot path: one file read + JSON.parse. Returns the record or null.
function readBackend(dir, name) {
    var rec = readJSON(backendPath(dir, name));
    if (rec === null || rec.stale || rec.backend.name !== name) {
        return null;
    }
    return rec;
}

// The host's record ({master, generation, host, pair}) or null. Enough to
// know whether a host has a certificate (the ssl-redirect check).
function readCert(dir, host) {
    var rec = readJSON(certPath(dir, host));
    if (rec === null || rec.stale || rec.host !== host ||
        typeof rec.pair !== 'string' || !PAIR_NAME.test(rec.pair)) {
        return null;
    }
    return rec;
}

// The host's certificate and key, {cert, key}, both from one pair file, or
// null. The record and the pair are two reads: a POST landing in between may
// point the record at a new pair and delete the old one, so a missing pair
// means "read the record again" (the new pair is written before the record
// names it). Three rounds: only a burst of rotations of this very host could
// exhaust them, and then the caller falls back as for an unknown host.
function readCertPair(dir, host) {
    for (var round = 0; round < 3; round++) {
        var rec = readCert(dir, host);
        if (rec === null) {
            return null;
        }
        var pair = readJSON(pairPath(dir, rec.pair));
        if (pair !== null && !pair.stale) {
            return {cert: pair.cert, key: pair.key};
        }
    }
    return null;
}

function readMeta(dir) {
    var rec = readJSON(dir + '/meta.json');
    return rec && !rec.stale ? rec : null;
}

function writeAtomic(path, data) {
    var tmp = path + '.tmp.' + process.pid;
    fs.writeFileSync(tmp, data, {mode: 0o600});
    fs.renameSync(tmp, path);
}

function unlinkQuiet(path) {
    try {
        fs.unlinkSync(path);
        return true;
    } catch (e) {
        if (e.code !== 'ENOENT') {
            throw e;
        }
        return false;
    }
}

function listDir(path) {
    try {
        return fs.readdirSync(path);
    } catch (e) {
        if (e.code === 'ENOENT') {
            return [];
        }
        throw e;
    }
}

function ensureDirs(dir) {
    fs.mkdirSync(dir + '/b', {recursive: true, mode: 0o700});
    fs.mkdirSync(dir + '/c', {recursive: true, mode: 0o700});
    fs.mkdirSync(dir + '/p', {recursive: true, mode: 0o700});
}

// Whether the lock at `path` names a process that no longer exists (or this one,
// which holds no lock between two handlers).
function ownerGone(path) {
    var pid;
    try {
        pid = parseInt(fs.readFileSync(path, 'utf8'), 10);
    } catch (e) {
        return false; // just released, or being written: try again
    }
    if (!(pid > 0)) {
        return false;
    }
    if (pid === process.pid) {
        return true;
    }
    try {
        fs.accessSync('/proc/' + pid);
        return false;
    } catch (e) {
        return e.code === 'ENOENT';
    }
}

// Non-blocking attempt; the handler retries with setTimeout.
function tryLock(dir) {
    var path = dir + '/lock';
    for (var attempt = 0; attempt < 2; attempt++) {
        try {
            fs.writeFileSync(path, String(process.pid), {flag: 'wx', mode: 0o600});
            return true;
        } catch (e) {
            if (e.code !== 'EEXIST') {
                throw e;
            }
        }
        // A writer holds the lock only during synchronous file writes: a lock
        // whose worker is gone (killed mid-write) is broken at once, and any lock
        // after LOCK_STALE_MS (its pid may have been reused).
        try {
            if (!ownerGone(path) && Date.now() - fs.statSync(path).mtimeMs < LOCK_STALE_MS) {
                return false;
            }
            fs.unlinkSync(path);
        } catch (e) {
            if (e.code !== 'ENOENT') {
                throw e;
            }
        }
    }
    return false;
}

function unlock(dir) {
    unlinkQuiet(dir + '/lock');
}

// Under the lock: the current meta, after deleting state of a previous
// nginx master.
function currentMeta(dir) {
    var meta = readMeta(dir);
    if (meta) {
        return meta;
    }
    var sub = ['b', 'c', 'p'];
    for (var s = 0; s < sub.length; s++) {
        var names = listDir(dir + '/' + sub[s]);
        for (var i = 0; i < names.length; i++) {
            unlinkQuiet(dir + '/' + sub[s] + '/' + names[i]);
        }
    }
    return {master: master(), backends: {version: null, generation: 0},
            certificates: {version: null, generation: 0}};
}

// payload: validate.backendsPayload's result; hashParts(backend) gives the
// parsed upstream_hash_by. Caller holds the lock. Returns the generation.
function writeBackends(dir, payload, hashParts) {
    var meta = currentMeta(dir);
    var gen = meta.backends.generation + 1;
    var m = master();
    for (var i = 0; i < payload.backends.length; i++) {
        var b = payload.backends[i];
        var ids = [];
        for (var j = 0; j < b.endpoints.length; j++) {
            var ep = b.endpoints[j];
            ids.push(md5hex((ep.address.indexOf(':') >= 0 ? '[' + ep.address + ']' : ep.address) +
                            ':' + ep.port));
        }
        writeAtomic(backendPath(dir, b.name), JSON.stringify({
            master: m, generation: gen, backend: b, ids: ids, hash: hashParts(b)}));
    }
    for (var k = 0; k < payload.removed.length; k++) {
        unlinkQuiet(backendPath(dir, payload.removed[k]));
    }
    meta.master = m;
    meta.backends = {version: payload.version, generation: gen};
    writeAtomic(dir + '/meta.json', JSON.stringify(meta));
    return gen;
}

// Mark and sweep, caller holds the lock: deletes every pair file no host
// record names. Reads every record (small), so it runs only when a POST
// released a pair. Also collects pairs a killed writer stored without
// getting to the records that would have named them.
function sweepPairs(dir) {
    var used = {};
    var names = listDir(dir + '/c');
    for (var i = 0; i < names.length; i++) {
        if (!/\.json$/.test(names[i])) {
            continue; // temp files
        }
        var rec = readJSON(dir + '/c/' + names[i]);
        if (rec && !rec.stale && typeof rec.pair === 'string') {
            used[rec.pair] = true;
        }
    }
    var pairs = listDir(dir + '/p');
    for (var j = 0; j < pairs.length; j++) {
        var m = /^([0-9a-f]{64})\.json$/.exec(pairs[j]);
        if (m && used[m[1]] !== true) {
            unlinkQuiet(dir + '/p/' + pairs[j]);
        }
    }
}

// The names in a directory, as a set.
function nameSet(path) {
    var set = {};
    var names = listDir(path);
    for (var i = 0; i < names.length; i++) {
        set[names[i]] = true;
    }
    return set;
}

function writeCertificates(dir, payload) {
    var meta = currentMeta(dir);
    var gen = meta.certificates.generation + 1;
    var m = master();
    var all = payload.certificates.slice();
    if (payload.default) {
        all.push({host: '#default', cert: payload.default.cert, key: payload.default.key});
    }
    // Which files exist, from one listing each: njs 0.7.9 makes a failed
    // read (ENOENT, an exception) slow once a large POST has filled the
    // request's heap (270 misses took 38 s after validating 35 MB of PEM).
    var records = nameSet(dir + '/c');
    var onDisk = nameSet(dir + '/p');
    // The pairs the changed and removed hosts named before this POST: the
    // only ones it can leave unused.
    var released = {};
    var touched = all.map(function (c) { return c.host; }).concat(payload.removed);
    for (var t = 0; t < touched.length; t++) {
        var old = records[touched[t] + '.json'] === true ? readCert(dir, touched[t]) : null;
        if (old) {
            released[old.pair] = true;
        }
    }
    var stored = {};
    for (var i = 0; i < all.length; i++) {
        var c = all[i];
        var digest = pairDigest(c.cert, c.key);
        // A pair file's name is its content (and under a current meta.json
        // every file is this master's, see currentMeta): one that exists is
        // this pair and is not rewritten.
        if (stored[digest] !== true && onDisk[digest + '.json'] !== true) {
            writeAtomic(pairPath(dir, digest), JSON.stringify({master: m, cert: c.cert, key: c.key}));
        }
        stored[digest] = true;
        writeAtomic(certPath(dir, c.host), JSON.stringify({
            master: m, generation: gen, host: c.host, pair: digest}));
    }
    for (var k = 0; k < payload.removed.length; k++) {
        if (records[payload.removed[k] + '.json'] === true) {
            unlinkQuiet(certPath(dir, payload.removed[k]));
        }
    }
    var sweep = Object.keys(released).some(function (d) { return stored[d] !== true; });
    if (sweep) {
        sweepPairs(dir);
    }
    meta.master = m;
    meta.certificates = {version: payload.version, generation: gen};
    writeAtomic(dir + '/meta.json', JSON.stringify(meta));
    return gen;
}

// GET helpers (debugging; they read every file)
function allBackends(dir) {
    var out = [];
    var names = listDir(dir + '/b');
    for (var i = 0; i < names.length; i++) {
        if (!/^[0-9a-f]{32}\.json$/.test(names[i])) {
            continue; // temp files
        }
        var rec = readJSON(dir + '/b/' + names[i]);
        if (rec && !rec.stale) {
            out.push(rec);
        }
    }
    return out;
}

function certHosts(dir) {
    var hosts = [];
    var hasDefault = false;
    var names = listDir(dir + '/c');
    for (var i = 0; i < names.length; i++) {
        var m = /^(.+)\.json$/.exec(names[i]);
        if (!m || names[i].indexOf('.tmp.') >= 0) {
            continue;
        }
        var rec = readJSON(dir + '/c/' + names[i]);
        if (!rec || rec.stale) {
            continue;
        }
        if (rec.host === '#default') {
            hasDefault = true;
        } else {
            hosts.push(rec.host);
        }
    }
    hosts.sort();
    return {hosts: hosts, hasDefault: hasDefault};
}

export default {md5hex, pairDigest, readBackend, readCert, readCertPair, readMeta, ensureDirs,
                tryLock, unlock, writeBackends, writeCertificates, allBackends, certHosts};
