-- The configuration API (content_by_lua on the unix socket server).
--
--   POST /configuration/backends          changed backends + removed names
--   GET  /configuration/backends          all backends (debugging)
--   GET  /configuration/backends/<name>   one backend
--   POST /configuration/certificates      changed certificates + removed hosts
--   GET  /configuration/certificates      hosts only, never keys
--   GET  /configuration/version           versions and generations
--   GET  /configuration/metrics           per-request metrics (text, ferrule.metrics)
local cjson = require("cjson.safe")
local fast = require("ferrule.fast")
local validate = require("ferrule.validate")
local store = require("ferrule.store")
local certificate = require("ferrule.certificate")
local util = require("ferrule.util")
local metrics = require("ferrule.metrics")

local ngx = ngx
local sub = string.sub

local _M = {}

local token -- set by ferrule.init in the master (inherited by workers)

function _M.set_token(t)
    token = t
end

local function reply(status, body)
    ngx.status = status
    ngx.header["Content-Type"] = "application/json"
    ngx.header["Cache-Control"] = "no-store"
    if type(body) == "table" then
        body = util.json_encode(body)
    end
    ngx.say(body)
    return ngx.exit(status)
end

local function fail(status, msg)
    return reply(status, { error = msg })
end

-- Defence in depth: only ever answer on a unix socket.
local function on_unix_socket()
    local addr = ngx.var.server_addr or ""
    local port = ngx.var.server_port or ""
    return sub(addr, 1, 5) == "unix:" and port == ""
end

local function authorized()
    if not token or token == "" then
        return false
    end
    local h = ngx.var.http_authorization
    if not h then
        return false
    end
    local given = h:match("^[Bb][Ee][Aa][Rr][Ee][Rr]%s+(%S+)%s*$")
    return util.secure_equals(given, token)
end

local function read_body()
    ngx.req.read_body()
    local body = ngx.req.get_body_data()
    if not body then
        local file = ngx.req.get_body_file()
        if file then
            local f, err = io.open(file, "rb")
            if not f then
                return nil, "cannot read request body: " .. tostring(err)
            end
            body = f:read("*a")
            f:close()
        end
    end
    if not body or body == "" then
        return nil, "empty request body"
    end
    local decoded, err = cjson.decode(body)
    if decoded == nil then
        return nil, "invalid JSON: " .. tostring(err)
    end
    return decoded
end

local function post_backends()
    local body, err = read_body()
    if body == nil then
        return fail(400, err)
    end
    local payload, verr = validate.backends_payload(body)
    if not payload then
        return fail(400, verr)
    end
    local gen, werr, status = store.write(payload)
    if not gen then
        ngx.log(ngx.ERR, "ferrule: POST backends: ", werr)
        return fail(status or 500, werr)
    end
    return reply(201, {
        version = payload.version,
        generation = gen,
        changed = #payload.backends,
        removed = #payload.removed,
    })
end

local function get_backends()
    if ngx.var.arg_names == "1" then
        -- names only (the controller's adoption): no backend is read or encoded, so
        -- 10k backends cost this worker milliseconds, not a tenth of a second
        return reply(200, {
            version = store.controller_version() or cjson.null,
            generation = store.generation(),
            names = util.array(store.names()),
        })
    end
    local parts = {}
    for _, name in ipairs(store.names()) do
        local s, v = store.get_raw(name)
        if s then
            parts[#parts + 1] = '{"generation":' .. tostring(v) .. ',"backend":' .. s .. "}"
        end
    end
    local head = util.json_encode({
        version = store.controller_version() or cjson.null,
        generation = store.generation(),
    })
    -- splice the stored JSON strings in without re-encoding them
    return reply(200, head:sub(1, -2) .. ',"backends":[' .. table.concat(parts, ",") .. "]}")
end

local function get_backend(name)
    local s, v = store.get_raw(name)
    if not s then
        return fail(404, "no backend named " .. name)
    end
    -- fast_path: the peers the C module balances it over (null: Lua does)
    local b = cjson.decode(s)
    local peers = b and fast.peers(name, #(b.endpoints or {}))
    return reply(200, '{"generation":' .. tostring(v) .. ',"fast_path":'
        .. util.json_encode(peers or cjson.null) .. ',"backend":' .. s .. "}")
end

local function post_certificates()
    local body, err = read_body()
    if body == nil then
        return fail(400, err)
    end
    local payload, verr = validate.certificates_payload(body, certificate.check)
    if not payload then
        return fail(400, verr)
    end
    local gen, werr = certificate.write(payload)
    -- even a partial write changed what is served: workers must drop their answers
    local _, terr = store.touch()
    if not gen then
        ngx.log(ngx.ERR, "ferrule: POST certificates: ", werr)
        return fail(507, werr)
    end
    if terr then
        ngx.log(ngx.ERR, "ferrule: POST certificates: ", terr)
        return fail(503, terr)
    end
    local capacity, free = certificate.usage()
    return reply(201, {
        version = payload.version,
        generation = gen,
        changed = #payload.certificates,
        removed = #payload.removed,
        default = payload.default ~= nil,
        capacity = capacity,
        free_space = free,
    })
end

local function get_certificates()
    local hosts, has_default = certificate.hosts()
    return reply(200, {
        version = certificate.dict():get("cv") or cjson.null,
        hosts = util.array(hosts),
        default = has_default,
    })
end

local function get_version()
    local workers = store.workers()
    return reply(200, {
        backends = {
            version = store.controller_version() or cjson.null,
            generation = store.generation(),
            -- generation applied by each live worker (reported every second
            -- and within 50 ms of a change)
            workers = next(workers) and workers or cjson.null,
        },
        certificates = {
            version = certificate.dict():get("cv") or cjson.null,
            generation = certificate.dict():get("g") or 0,
            -- bytes (nil: this lua-nginx-module cannot tell)
            capacity = (certificate.usage()),
            free_space = select(2, certificate.usage()),
        },
    })
end

local function get_metrics()
    local text, err = metrics.dump()
    if not text then
        return fail(404, err)
    end
    ngx.status = 200
    ngx.header["Content-Type"] = "text/plain; charset=utf-8"
    ngx.header["Cache-Control"] = "no-store"
    ngx.print(text)
    return ngx.exit(200)
end

function _M.handle()
    if not on_unix_socket() then
        ngx.log(ngx.ERR, "ferrule: configuration API reached on ",
                ngx.var.server_addr, ":", ngx.var.server_port,
                "; it must only listen on a unix socket")
        return fail(403, "the configuration API is only served on its unix socket")
    end
    if not authorized() then
        ngx.header["WWW-Authenticate"] = 'Bearer realm="ferrule"'
        return fail(401, "missing or wrong bearer token")
    end
    local method = ngx.req.get_method()
    local uri = ngx.var.uri
    if uri == "/configuration/backends" then
        if method == "POST" then
            return post_backends()
        elseif method == "GET" then
            return get_backends()
        end
    elseif sub(uri, 1, 24) == "/configuration/backends/" and #uri > 24 then
        if method == "GET" then
            return get_backend(sub(uri, 25))
        end
    elseif uri == "/configuration/certificates" then
        if method == "POST" then
            return post_certificates()
        elseif method == "GET" then
            return get_certificates()
        end
    elseif uri == "/configuration/version" then
        if method == "GET" then
            return get_version()
        end
    elseif uri == "/configuration/metrics" then
        if method == "GET" then
            return get_metrics()
        end
    else
        return fail(404, "unknown configuration endpoint " .. uri)
    end
    ngx.header["Allow"] = (uri == "/configuration/version" or uri == "/configuration/metrics" or #uri > 24
        and sub(uri, 1, 24) == "/configuration/backends/") and "GET" or "GET, POST"
    return fail(405, "method " .. method .. " not allowed on " .. uri)
end

return _M
