// Certificate/key checks for POST /configuration/certificates, with what
// njs 0.7.9 offers: PEM/DER parsing in JavaScript and WebCrypto
// (crypto.subtle) to prove that the key belongs to the certificate (sign a
// random challenge with the key, verify it with the certificate's public
// key). There is no X.509 API in njs 0.7.9, so the certificate is parsed
// just far enough to extract its SubjectPublicKeyInfo.
//
// Key-match check supported for RSA (PKCS#1 or PKCS#8 PEM) and ECDSA P-256,
// P-384, P-521 (SEC1 or PKCS#8 PEM). Other key types (Ed25519, RSA-PSS) are
// checked for PEM/DER structure only; a mismatch then fails at handshake time
// for that host alone.

var OID = {
    rsa: '2a864886f70d010101',     // 1.2.840.113549.1.1.1 rsaEncryption
    ec: '2a8648ce3d0201',          // 1.2.840.10045.2.1 id-ecPublicKey
    p256: '2a8648ce3d030107',      // 1.2.840.10045.3.1.7 prime256v1
    p384: '2b81040022',            // 1.3.132.0.34 secp384r1
    p521: '2b81040023',            // 1.3.132.0.35 secp521r1
};
var CURVES = {};
CURVES[OID.p256] = 'P-256';
CURVES[OID.p384] = 'P-384';
CURVES[OID.p521] = 'P-521';

function hex(buf) {
    return Buffer.from(buf).toString('hex');
}

// All PEM blocks: [{type, der}]; throws on bad base64.
function blocks(pem) {
    var re = /-----BEGIN ([A-Z0-9 ]+)-----([^-]*)-----END ([A-Z0-9 ]+)-----/g;
    var out = [];
    var m;
    while ((m = re.exec(pem)) !== null) {
        if (m[1] !== m[3]) {
            throw new Error('PEM block BEGIN ' + m[1] + ' ends with END ' + m[3]);
        }
        var b64 = m[2].replace(/\s+/g, '');
        if (b64.length === 0 || b64.length % 4 !== 0 || !/^[A-Za-z0-9+\/]+={0,2}$/.test(b64)) {
            throw new Error('PEM block ' + m[1] + ' is not valid base64');
        }
        out.push({type: m[1], der: Buffer.from(b64, 'base64')});
    }
    return out;
}

// One DER TLV at off: {tag, start (of contents), end}; throws if malformed.
function tlv(der, off, limit) {
    if (limit === undefined) {
        limit = der.length;
    }
    if (off + 2 > limit) {
        throw new Error('truncated DER');
    }
    var tag = der[off];
    var len = der[off + 1];
    var p = off + 2;
    if (len & 0x80) {
        var n = len & 0x7f;
        if (n < 1 || n > 4 || p + n > limit) {
            throw new Error('bad DER length');
        }
        len = 0;
        for (var i = 0; i < n; i++) {
            len = len * 256 + der[p + i];
        }
        p += n;
    }
    if (p + len > limit) {
        throw new Error('truncated DER');
    }
    return {tag: tag, off: off, start: p, end: p + len};
}

function children(der, node) {
    var out = [];
    var p = node.start;
    while (p < node.end) {
        var c = tlv(der, p, node.end);
        out.push(c);
        p = c.end;
    }
    return out;
}

// A whole-buffer SEQUENCE, or throw.
function topSequence(der, what) {
    var top = tlv(der, 0);
    if (top.tag !== 0x30 || top.end !== der.length) {
        throw new Error(what + ' is not a DER SEQUENCE');
    }
    return top;
}

function encodeLen(n) {
    if (n < 0x80) {
        return [n];
    }
    var bytes = [];
    while (n > 0) {
        bytes.unshift(n & 0xff);
        n = Math.floor(n / 256);
    }
    return [0x80 | bytes.length].concat(bytes);
}

function wrap(tag, content) {
    return Buffer.concat([Buffer.from([tag].concat(encodeLen(content.length))), content]);
}

// Certificate -> {spki: Buffer, alg: 'rsa'|'ec'|other oid hex, curve}
function certificateKey(der) {
    var top = topSequence(der, 'certificate');
    var tbs = children(der, top)[0];
    if (!tbs || tbs.tag !== 0x30) {
        throw new Error('certificate has no TBSCertificate');
    }
    var f = children(der, tbs);
    var i = f.length && f[0].tag === 0xa0 ? 1 : 0; // explicit version
    // serial, signature algorithm, issuer, validity, subject, spki
    var spki = f[i + 5];
    if (!spki || spki.tag !== 0x30) {
        throw new Error('certificate has no subjectPublicKeyInfo');
    }
    var algId = children(der, children(der, spki)[0]);
    var oid = hex(der.slice(algId[0].start, algId[0].end));
    var out = {spki: der.slice(spki.off, spki.end), alg: oid};
    if (oid === OID.rsa) {
        out.alg = 'rsa';
    } else if (oid === OID.ec) {
        out.alg = 'ec';
        out.curve = algId[1] && algId[1].tag === 0x06 ?
            CURVES[hex(der.slice(algId[1].start, algId[1].end))] : undefined;
    }
    return out;
}

function oidTLV(h) {
    return wrap(0x06, Buffer.from(h, 'hex'));
}

// Private key PEM block -> PKCS#8 DER (for crypto.subtle.importKey).
function pkcs8(block, certCurveOid) {
    var der = block.der;
    topSequence(der, 'private key');
    if (block.type === 'PRIVATE KEY') {
        return der;
    }
    var version = wrap(0x02, Buffer.from([0]));
    if (block.type === 'RSA PRIVATE KEY') {
        var rsaAlg = wrap(0x30, Buffer.concat([oidTLV(OID.rsa), Buffer.from([0x05, 0x00])]));
        return wrap(0x30, Buffer.concat([version, rsaAlg, wrap(0x04, der)]));
    }
    if (block.type === 'EC PRIVATE KEY') {
        // ECPrivateKey ::= SEQUENCE { version, privateKey, [0] parameters, [1] publicKey }
        var curve = certCurveOid;
        var f = children(der, tlv(der, 0));
        for (var i = 0; i < f.length; i++) {
            if (f[i].tag === 0xa0) {
                var p = tlv(der, f[i].start, f[i].end);
                if (p.tag === 0x06) {
                    curve = hex(der.slice(p.start, p.end));
                }
            }
        }
        if (!curve) {
            throw new Error('EC key without a named curve');
        }
        var ecAlg = wrap(0x30, Buffer.concat([oidTLV(OID.ec), oidTLV(curve)]));
        return wrap(0x30, Buffer.concat([version, ecAlg, wrap(0x04, der)]));
    }
    if (block.type === 'ENCRYPTED PRIVATE KEY') {
        throw new Error('encrypted private keys are not supported');
    }
    throw new Error('unsupported private key type ' + block.type);
}

function curveOid(name) {
    for (var k in CURVES) {
        if (CURVES[k] === name) {
            return k;
        }
    }
    return undefined;
}

// Resolves to null when the pair is usable, or to an error message.
async function check(certPem, keyPem) {
    var certs;
    var keyBlock;
    var info;
    try {
        certs = blocks(certPem).filter(function (b) { return b.type === 'CERTIFICATE'; });
        if (certs.length === 0) {
            return 'cert: no CERTIFICATE PEM block';
        }
        for (var i = 0; i < certs.length; i++) {
            topSequence(certs[i].der, 'certificate ' + i);
        }
        info = certificateKey(certs[0].der);
    } catch (e) {
        return 'cert: ' + e.message;
    }
    var keyDer;
    try {
        var keys = blocks(keyPem).filter(function (b) { return /PRIVATE KEY$/.test(b.type); });
        if (keys.length !== 1) {
            return 'key: expected exactly one PRIVATE KEY PEM block, found ' + keys.length;
        }
        keyBlock = keys[0];
        keyDer = pkcs8(keyBlock, info.curve && curveOid(info.curve));
    } catch (e) {
        return 'key: ' + e.message;
    }

    var imp;
    var sig;
    if (info.alg === 'rsa') {
        imp = {name: 'RSASSA-PKCS1-v1_5', hash: 'SHA-256'};
        sig = {name: 'RSASSA-PKCS1-v1_5'};
    } else if (info.alg === 'ec' && info.curve) {
        imp = {name: 'ECDSA', namedCurve: info.curve};
        sig = {name: 'ECDSA', hash: 'SHA-256'};
    } else {
        return null; // structure checked; no WebCrypto algorithm for this key type
    }
    var pub;
    try {
        pub = await crypto.subtle.importKey('spki', info.spki, imp, false, ['verify']);
    } catch (e) {
        return 'cert: cannot import the public key: ' + e.message;
    }
    var priv;
    try {
        priv = await crypto.subtle.importKey('pkcs8', keyDer, imp, false, ['sign']);
    } catch (e) {
        return 'private key does not match the certificate (' + e.message + ')';
    }
    var challenge = crypto.getRandomValues(new Uint8Array(32));
    var ok = false;
    try {
        var s = await crypto.subtle.sign(sig, priv, challenge);
        ok = await crypto.subtle.verify(sig, pub, s, challenge);
    } catch (e) {
        return 'private key does not match the certificate (' + e.message + ')';
    }
    return ok ? null : 'private key does not match the certificate';
}

export default {check, blocks, certificateKey};
