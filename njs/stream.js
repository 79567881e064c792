// TCP/UDP services: the peer of each connection (js_set $ferrule_stream_peer in
// the stream block; see njs/README.md, "TCP and UDP services").
//
// NGINX's stream subsystem has no Lua here and no balancer API: the controller
// writes one file per stream backend, $ferrule_stream_peers/<backend>.json =
// {"backend": NAME, "peers": ["addr:port", "[v6]:port", ...]}, replaced
// atomically (rename) when its endpoints change, and this picks one per
// connection. Works with either HTTP balancer (Lua or njs).
import fs from 'fs';
import balance from 'ferrule/balance.js';

// Backend names are namespace_service_port[_udp]: DNS labels and `_`.
var NAME = /^[a-z0-9][a-z0-9._-]{0,1023}$/;

// "addr:port" for proxy_pass, or "" (no such backend, no endpoints: NGINX
// closes the connection).
function peer(s) {
    var name = s.variables.ferrule_backend || '';
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

export default {peer};
