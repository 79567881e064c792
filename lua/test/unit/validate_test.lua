-- What the API's case files (balancer/cases/, run by contract_test.lua) cannot
-- show: the certificate parser the handler plugs into the validator.
local validate = require("ferrule.validate")

local T = {}

local PEM = "-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n"
local KEY = "-----BEGIN PRIVATE KEY-----\nx\n-----END PRIVATE KEY-----\n"

T["a pair the parser refuses is refused naming it"] = function(t)
    local refuse = function() return nil, "bad pem" end
    local _, err = validate.certificates_payload({ version = 1,
        certificates = { { host = "A.example.com", cert = PEM, key = KEY } } }, refuse)
    t.eq(err, "certificates[0]: a.example.com: bad pem")
    _, err = validate.certificates_payload({ version = 1, default = { cert = PEM, key = KEY } }, refuse)
    t.eq(err, "default: bad pem")
    local seen = {}
    t.ok(validate.certificates_payload({ version = 1, default = { cert = PEM, key = KEY } },
        function(cert, key) seen[#seen + 1] = cert .. key; return true end))
    t.eq(seen[1], PEM .. KEY)
end

return T
