-- init_by_lua entry point: read the API token, preload modules (so workers
-- share them copy-on-write) and check the shared dicts exist.
local util = require("ferrule.util")

local _M = {}

-- opts: { token_file = path }  or  { token = "..." } (tests), and
-- answers = { unavailable = "unix:...", redirect = "unix:...", redirect_code = 308 }: the
-- servers balance() proxies to for a 503 and for the ssl-redirect (nginx.conf), and
-- the status of the ssl-redirect rewrite() answers itself (http-redirect-code);
-- metrics = nil or { source = "module"|"lua", time, length, size }: per-request
-- metrics (ferrule.metrics); ocsp = nil or { allow_local = bool, resolvers = {
-- "10.96.0.10", ... } }: staple OCSP responses (ferrule.ocsp), asking loopback,
-- link-local and unspecified responders only with allow_local
-- (--allow-local-endpoints), looking names up with those nameservers.
function _M.init(opts)
    opts = opts or {}
    local token = opts.token
    if not token then
        local path = opts.token_file
        if not path then
            error("ferrule.init: token_file is required")
        end
        local f, err = io.open(path, "r")
        if not f then
            error("ferrule.init: cannot read token file " .. path .. ": " .. tostring(err))
        end
        token = f:read("*a") or ""
        f:close()
    end
    token = util.trim(token)
    if token == "" then
        error("ferrule.init: the API token is empty")
    end
    if #token < 16 then
        ngx.log(ngx.WARN, "ferrule: the API token is shorter than 16 characters")
    end

    for _, dict in ipairs({ "ferrule_backends", "ferrule_certificates" }) do
        if not ngx.shared[dict] then
            error("ferrule.init: lua_shared_dict " .. dict .. " is not declared")
        end
    end

    require("ferrule.metrics").init(opts.metrics)
    require("ferrule.configuration").set_token(token)
    require("ferrule.balancer").set_answers(opts.answers)
    require("ferrule.certificate")
    require("ferrule.ocsp").configure(opts.ocsp)
    require("ngx.ssl")
    require("resty.lrucache")
end

return _M
