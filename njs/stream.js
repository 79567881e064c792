// TCP/UDP services: the peer of each connection (js_set $ferrule_stream_peer in
// the stream block; see njs/README.md, "TCP and UDP services").
//
// NGINX's stream subsystem has no Lua here and no balancer API: the controller
// writes one file per stream backend, $ferrule_stream_peers/<backend>.json =
// {"backend": NAME, "peers": ["addr:port", "[v6]:port", ...]}, replaced
// atomically (rename) when its endpoints change, and this picks one per
// connection. Works with either HTTP balancer (Lua or njs). Where Ferrule's
// stream module loads, it reads the same files instead and gives NGINX every
// peer, so that a failed connection tries the next (this picks one, no retry).
import fs from 'fs';
import balance from 'ferrule/balance.js';

// Backend names are namespace_service_port[_udp]: DNS labels and `_`.
var NAME = /^[a-z0-9][a-z0-9._-]{0,1023}$/;

// The peer of a TCP/UDP service: its server sets $ferrule_backend.
function peer(s) {
    return pick(s, s.variables.ferrule_backend || '');
}

// The peer of an ssl-passthrough host, by SNI: $ferrule_passthrough_backend is
// a map of $ssl_preread_server_name, known only once the preread phase has read
// the ClientHello (a `set` would run before it), so it is read here, when
// proxy_pass asks.
function passthroughPeer(s) {
    return pick(s, s.variables.ferrule_passthrough_backend || '');
}

// "addr:port" for proxy_pass, or "" (no such backend, no endpoints: NGINX
// closes the connection).
function pick(s, name) {
    if (!NAME.test(name)) {
        return '';
    }
    var rec;
    try {
        rec = JSON.parse(fs.readFileSync(s.variables.ferrule_stream_peers + '/' + name + '.json'));
    } catch (e) {
        if (e.code !== 'ENOENT') {
            s.error('ferrule: stream backend ' + name + ': ' + e.message);
        }
        return '';
    }
    var peers = rec.backend === name && Array.isArray(rec.peers) ? rec.peers : [];
    if (peers.length === 0) {
        s.warn('ferrule: stream backend ' + name + ' has no endpoints');
        return '';
    }
    // Round robin over connections without a counter (see balance.js).
    return peers[balance.rrIndex(peers.length, s.variables.connection, 1)];
}

export default {peer, passthroughPeer};
