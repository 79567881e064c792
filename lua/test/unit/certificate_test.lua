local certificate = require("ferrule.certificate")

local T = {}

T["wildcard replaces exactly one label"] = function(t)
    t.eq(certificate.wildcard("a.example.com"), "*.example.com")
    t.eq(certificate.wildcard("a.b.example.com"), "*.b.example.com")
    t.eq(certificate.wildcard("localhost"), nil)
end

T["lookup order: exact, wildcard, default"] = function(t)
    local c = certificate.candidates("A.Example.com.")
    t.eq(#c, 3)
    t.eq(c[1], "a.example.com")
    t.eq(c[2], "*.example.com")
    t.eq(c[3], certificate.DEFAULT)
    t.eq(#certificate.candidates(nil), 1)
end

return T
