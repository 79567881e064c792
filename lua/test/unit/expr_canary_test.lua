local expr = require("ferrule.expr")
local canary = require("ferrule.canary")

local T = {}

T["expr parses and evaluates"] = function(t)
    local vars = { request_uri = "/a?b", arg_user = "bob", http_x_a = "1", host = "h" }
    local get = function(n) return vars[n] end
    t.eq(expr.eval(assert(expr.parse("$request_uri")), get), "/a?b")
    t.eq(expr.eval(assert(expr.parse("$arg_user$http_x_a")), get), "bob1")
    t.eq(expr.eval(assert(expr.parse("${host}-x-$missing.")), get), "h-x-.")
    t.eq(expr.eval(assert(expr.parse("const")), get), "const")
    t.eq(expr.eval(assert(expr.parse("$Arg_User")), get), "bob")
    t.ok(not expr.parse("$"))
    t.ok(not expr.parse("${host"))
    t.ok(not expr.parse("a$-b"))
end

T["canary header"] = function(t)
    local never = function() error("random must not be used") end
    local p = { header = "X-Canary", weight = 0 }
    t.eq(canary.decide(p, "always", nil, never), true)
    t.eq(canary.decide(p, "never", nil, never), false)
    t.eq(canary.decide(p, "other", nil, never), false)
    t.eq(canary.decide({ header = "X-Canary", weight = 100, weight_total = 100 }, "never", nil, never), false)
    local pv = { header = "X-Canary", header_value = "yes" }
    t.eq(canary.decide(pv, "yes", nil, never), true)
    t.eq(canary.decide(pv, "YES", nil, never), false)
    t.eq(canary.decide(pv, "always", nil, never), false) -- exact match only
    -- a non-matching value falls through to cookie/weight
    t.eq(canary.decide({ header = "X-Canary", header_value = "yes", cookie = "c" }, "no", "always", never), true)
end

T["canary header pattern"] = function(t)
    local never = function() return 999 end
    local p = { header = "X-Canary", header_pattern = "^(beta|alpha)-\\d+$" }
    t.eq(canary.decide(p, "beta-12", nil, never), true)
    t.eq(canary.decide(p, "gamma-1", nil, never), false)
    t.eq(canary.decide(p, "always", nil, never), false) -- the pattern replaces always/never
    -- no match falls through to the cookie, then the weight
    t.eq(canary.decide({ header = "X-Canary", header_pattern = "^b", cookie = "c" }, "x", "always", never), true)
    t.eq(canary.decide({ header = "X-Canary", header_pattern = "^b", weight = 100 }, "x", nil, never), true)
    -- header_value wins over the pattern (ingress-nginx)
    t.eq(canary.decide({ header = "X-Canary", header_value = "v", header_pattern = "^b" }, "beta", nil, never), false)
    -- a pattern PCRE refuses keeps the primary, even with weight
    t.eq(canary.decide({ header = "X-Canary", header_pattern = "(", weight = 100 }, "x", nil, never), false)
    -- look-around is PCRE's
    t.eq(canary.decide({ header = "X-Canary", header_pattern = "^(?!old)" }, "new", nil, never), true)
    t.eq(canary.decide({ header = "X-Canary", header_pattern = "^(?!old)" }, "old", nil, never), false)
    -- A match needing more than lua_regex_match_limit (100,000) steps but fewer than
    -- PCRE's default (10 million): ~300,000 for 28 "a"s. It ends in an error, which
    -- keeps the primary even at weight 100; without the limit it would end in "no
    -- match" and the weight would pick the canary.
    local p = { header = "X-Canary", header_pattern = "^(a|aa)+$", weight = 100 }
    t.eq(canary.decide(p, string.rep("a", 28) .. "b", nil, never), false)
    t.eq(canary.decide(p, string.rep("a", 8) .. "b", nil, never), true, "few steps: no match")
end

T["canary cookie"] = function(t)
    local never = function() error("random must not be used") end
    local p = { cookie = "c", weight = 50 }
    t.eq(canary.decide(p, nil, "always", never), true)
    t.eq(canary.decide(p, nil, "never", never), false)
    -- header wins over cookie
    t.eq(canary.decide({ header = "H", cookie = "c" }, "never", "always", never), false)
end

T["canary weight split"] = function(t)
    local p = { weight = 20, weight_total = 100 }
    local hits = 0
    for i = 1, 100 do
        if canary.decide(p, nil, nil, function(n) t.eq(n, 100); return i end) then
            hits = hits + 1
        end
    end
    t.eq(hits, 20)
    t.eq(canary.decide({ weight = 0 }, nil, nil, nil), false)
    t.eq(canary.decide({ weight = 5, weight_total = 5 }, nil, nil, nil), true)
    t.eq(canary.header_var("X-Canary-Flag"), "http_x_canary_flag")
end

return T
