/*
 * ferrule_alias $NAME $VARIABLE...;
 *                 http: $NAME reads as the first of the variables that is not
 *                 empty (the last one whatever it is).
 *
 * nginx.conf's headers to the backend read variables that are another variable
 * as it is (without use-forwarded-headers: `map "" $ferrule_scheme { default
 * $scheme; }`) or the first of two that is not empty (`map $http_host
 * $ferrule_host { "" $host; default $http_host; }`). A map evaluates its key,
 * hashes and looks it up and copies its value into a new buffer on every
 * request that reads it, and every proxied request reads seven of them
 * (test/bench/RESULTS.md). An alias hands out the variable it picks.
 *
 * Changeable and cacheable, as a map's variable: a location may still `set` it
 * (upstream-vhost sets $ferrule_upstream_host), and a read after that gets what
 * was set.
 */

#include "ngx_http_ferrule_module.h"


typedef struct {
    ngx_uint_t   n;
    ngx_int_t   *index;
} ngx_http_ferrule_alias_t;


static ngx_int_t ngx_http_ferrule_alias_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);


char *
ngx_http_ferrule_alias(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_str_t                 *value, name;
    ngx_uint_t                 i;
    ngx_http_variable_t       *v;
    ngx_http_ferrule_alias_t  *alias;

    value = cf->args->elts;

    if (ngx_http_ferrule_variable_name(cf, cmd, &value[1], &name) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    alias = ngx_palloc(cf->pool, sizeof(ngx_http_ferrule_alias_t));
    if (alias == NULL) {
        return NGX_CONF_ERROR;
    }

    alias->n = cf->args->nelts - 2;
    alias->index = ngx_palloc(cf->pool, alias->n * sizeof(ngx_int_t));
    if (alias->index == NULL) {
        return NGX_CONF_ERROR;
    }

    for (i = 0; i < alias->n; i++) {
        alias->index[i] = ngx_http_ferrule_variable_arg(cf, cmd, &value[i + 2],
                                                        &name);
        if (alias->index[i] == NGX_ERROR) {
            return NGX_CONF_ERROR;
        }
    }

    v = ngx_http_add_variable(cf, &name, NGX_HTTP_VAR_CHANGEABLE);
    if (v == NULL) {
        return NGX_CONF_ERROR;
    }

    v->get_handler = ngx_http_ferrule_alias_variable;
    v->data = (uintptr_t) alias;

    return NGX_CONF_OK;
}


static ngx_int_t
ngx_http_ferrule_alias_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    ngx_http_ferrule_alias_t *alias = (ngx_http_ferrule_alias_t *) data;

    ngx_uint_t                  i;
    ngx_http_variable_value_t  *target;

    for (i = 0; /* void */; i++) {
        target = ngx_http_get_indexed_variable(r, alias->index[i]);
        if (target == NULL) {
            return NGX_ERROR;
        }

        if (i == alias->n - 1 || (!target->not_found && target->len)) {
            break;
        }
    }

    *v = *target;

    return NGX_OK;
}
