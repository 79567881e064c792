// File-based state (njs 0.7.9 has no shared dictionary: js_shared_dict_zone
// arrived in 0.8.0, and no JavaScript value survives a request).
//
//   STATE/meta.json          {"master", "backends": {"version", "generation"},
//                             "certificates": {"version", "generation"}}
//   STATE/b/<md5(name)>.json {"master", "generation", "backend", "ids", "hash"}
//   STATE/c/<host>.json      {"master", "generation", "host", "cert", "key"}
//                            ("#default.json" holds the posted default)
//   STATE/lock               writer mutex between workers (O_EXCL create)
//
// Every file is replaced atomically (write a temp file, rename it over the
// old one), so a reader sees the old or the new version, never a mix.
// Readers open exactly the file they need: a request reads its backend's
// file (plus the canary backend's when the canary is chosen), a TLS handshake
// reads one to three certificate files. Nothing is cached (nothing can be),
// so a change is visible to the very next request in every worker.
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

function readCert(dir, host) {
    var rec = readJSON(certPath(dir, host));
    if (rec === null || rec.stale || rec.host !== host) {
        return null;
    }
    return rec;
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
    var sub = ['b', 'c'];
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

function writeCertificates(dir, payload) {
    var meta = currentMeta(dir);
    var gen = meta.certificates.generation + 1;
    var m = master();
    var all = payload.certificates.slice();
    if (payload.default) {
        all.push({host: '#default', cert: payload.default.cert, key: payload.default.key});
    }
    for (var i = 0; i < all.length; i++) {
        var c = all[i];
        writeAtomic(certPath(dir, c.host), JSON.stringify({
            master: m, generation: gen, host: c.host, cert: c.cert, key: c.key}));
    }
    for (var k = 0; k < payload.removed.length; k++) {
        unlinkQuiet(certPath(dir, payload.removed[k]));
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

export default {md5hex, readBackend, readCert, readMeta, ensureDirs, tryLock, unlock,
                writeBackends, writeCertificates, allBackends, certHosts};
