-- OCSP stapling (ConfigMap enable-ocsp): the handshake staples the response the
-- certificate's responder last gave, fetched in the background.
--
-- NGINX's own ssl_stapling works only for certificates it loads at start, and
-- Ferrule's come from the store (ferrule.certificate). So, as ingress-nginx does:
-- a handshake whose pair has no fresh response starts a timer that asks the
-- responder named in the certificate (its Authority Information Access), checks
-- the answer against the chain and keeps it in the certificate store:
--   o:<digest>   the DER response, kept for MAX_AGE
--   of:<digest>  present while the response is fresh or a fetch runs; when it
--                expires, the next handshake fetches again (and staples the old
--                response meanwhile)
-- Every write is a safe_*: an OCSP response never evicts a certificate.
-- A response that does not validate (a revoked certificate, a responder that
-- signs for another issuer) is dropped, and nothing is stapled.
local ngx_ocsp = require("ngx.ocsp")
local ssl = require("ngx.ssl")

local ngx = ngx
local concat = table.concat
local match = string.match

local _M = {}

_M.enabled = false
-- seconds: a response is fetched again after FRESH, and served at most MAX_AGE
-- (responders' answers are valid for days; this bounds a revocation's delay)
_M.FRESH = 3600
_M.MAX_AGE = 2 * 3600
-- a failed fetch waits this long before the next one
_M.RETRY = 30
_M.TIMEOUT_MS = 3000
_M.MAX_RESPONSE = 64 * 1024

local function dict()
    return ngx.shared.ferrule_certificates
end

-- "http://host[:port]/path" -> host, port, path, Host header; nil for anything
-- else (OCSP is plain HTTP: the response is signed).
local function parse_url(url)
    local authority, path = match(url, "^[Hh][Tt][Tt][Pp]://([^/?#]+)([^#]*)$")
    if not authority or authority:find("@", 1, true) then
        return nil
    end
    local host, port = match(authority, "^%[([%x:.]+)%]:?(%d*)$")
    if not host then
        host, port = match(authority, "^([%w.-]+):?(%d*)$")
    end
    if not host then
        return nil
    end
    port = tonumber(port ~= "" and port or "80")
    if not port or port < 1 or port > 65535 then
        return nil
    end
    return host, port, path ~= "" and path or "/", authority
end
_M.parse_url = parse_url

-- POSTs `body` to the responder; the response body, or nil and why.
local function post(url, body)
    local host, port, path, authority = parse_url(url)
    if not host then
        return nil, "responder URL " .. url .. " is not http://host[:port]/path"
    end
    local sock = ngx.socket.tcp()
    sock:settimeouts(_M.TIMEOUT_MS, _M.TIMEOUT_MS, _M.TIMEOUT_MS)
    local ok, err = sock:connect(host, port)
    if not ok then
        return nil, "connect " .. authority .. ": " .. tostring(err)
    end
    ok, err = sock:send(concat({
        "POST ", path, " HTTP/1.0\r\nHost: ", authority,
        "\r\nContent-Type: application/ocsp-request\r\nContent-Length: ", #body,
        "\r\n\r\n", body,
    }))
    if not ok then
        sock:close()
        return nil, "send: " .. tostring(err)
    end
    local status = sock:receive("*l")
    local code = status and tonumber(match(status, "^HTTP/%d%.%d (%d%d%d)"))
    local length
    while true do
        local line, rerr = sock:receive("*l")
        if not line then
            sock:close()
            return nil, "headers: " .. tostring(rerr)
        end
        if line == "" then
            break
        end
        local n = match(line:lower(), "^content%-length:%s*(%d+)")
        length = n and tonumber(n) or length
    end
    if code ~= 200 then
        sock:close()
        return nil, "responder answered " .. tostring(status)
    end
    if length and length > _M.MAX_RESPONSE then
        sock:close()
        return nil, "response of " .. length .. " bytes"
    end
    local resp, rerr, partial = sock:receive(length or _M.MAX_RESPONSE)
    sock:close()
    if not resp and not length and rerr == "closed" then
        resp = partial -- HTTP/1.0 without Content-Length: read until closed
    end
    if not resp then
        return nil, "body: " .. tostring(rerr)
    end
    return resp
end

local function fetch(premature, digest, der)
    if premature then
        return
    end
    local d = dict()
    local url, err = ngx_ocsp.get_ocsp_responder_from_der_chain(der)
    if not url then
        ngx.log(ngx.WARN, "ferrule: OCSP: no responder in the certificate: ", err)
        return
    end
    local req
    req, err = ngx_ocsp.create_ocsp_request(der)
    if not req then
        ngx.log(ngx.WARN, "ferrule: OCSP request for ", url, ": ", err)
        return
    end
    local resp
    resp, err = post(url, req)
    if not resp then
        ngx.log(ngx.WARN, "ferrule: OCSP ", url, ": ", err)
        return
    end
    local ok, verr = ngx_ocsp.validate_ocsp_response(resp, der)
    if not ok then
        ngx.log(ngx.WARN, "ferrule: OCSP response of ", url, " not stapled: ", verr)
        d:delete("o:" .. digest)
        return
    end
    ok, err = d:safe_set("o:" .. digest, resp, _M.MAX_AGE)
    if not ok then
        ngx.log(ngx.WARN, "ferrule: OCSP response not kept: ", err)
        return
    end
    d:safe_set("of:" .. digest, true, _M.FRESH)
end

-- In ssl_certificate_by_lua, once the pair is set: staples its response, and
-- starts a fetch when there is none or it is due. `pem` is the chain's PEM.
function _M.staple(digest, pem)
    if not _M.enabled or not digest then
        return
    end
    local d = dict()
    local resp = d:get("o:" .. digest)
    if resp then
        local ok, err = ngx_ocsp.set_ocsp_status_resp(resp)
        if not ok then
            ngx.log(ngx.WARN, "ferrule: OCSP staple: ", err)
        end
    end
    -- one fetch at a time per pair, and none while the response is fresh
    if d:safe_add("of:" .. digest, true, _M.RETRY) then
        local der, err = ssl.cert_pem_to_der(pem)
        if not der then
            ngx.log(ngx.WARN, "ferrule: OCSP: ", err)
            return
        end
        local ok, terr = ngx.timer.at(0, fetch, digest, der)
        if not ok then
            ngx.log(ngx.WARN, "ferrule: OCSP fetch not started: ", terr)
        end
    end
end

-- The pair `digest` left the store: its response goes with it.
function _M.forget(digest)
    local d = dict()
    d:delete("o:" .. digest)
    d:delete("of:" .. digest)
end

return _M
