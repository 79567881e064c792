/*
 * ferrule_alias $NAME $VARIABLE;   http: $NAME reads as $VARIABLE.
 *
 * Without use-forwarded-headers, nginx.conf's forwarded variables are each
 * another variable as it is: `map "" $ferrule_scheme { default $scheme; }`. A
 * map evaluates its key, looks the key up and copies its value into a new
 * buffer on every request that reads it, and every proxied request reads five
 * of them (test/bench/RESULTS.md). An alias hands out the variable it names.
 *
 * Changeable and cacheable, as a map's variable: a location may still `set` it
 * (upstream-vhost sets $ferrule_upstream_host), and a read after that gets what
 * was set.
 */

#include "ngx_http_ferrule_module.h"


static ngx_int_t ngx_http_ferrule_alias_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);


char *
ngx_http_ferrule_alias(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_str_t            *value, name, target;
    ngx_int_t             index;
    ngx_http_variable_t  *v;

    value = cf->args->elts;

    if (value[1].len < 2 || value[1].data[0] != '$'
        || value[2].len < 2 || value[2].data[0] != '$')
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "ferrule_alias takes two variables, not \"%V\" "
                           "and \"%V\"", &value[1], &value[2]);
        return NGX_CONF_ERROR;
    }

    name.len = value[1].len - 1;
    name.data = value[1].data + 1;
    target.len = value[2].len - 1;
    target.data = value[2].data + 1;

    if (name.len == target.len
        && ngx_strncasecmp(name.data, target.data, name.len) == 0)
    {
        return "names the variable it defines";
    }

    v = ngx_http_add_variable(cf, &name, NGX_HTTP_VAR_CHANGEABLE);
    if (v == NULL) {
        return NGX_CONF_ERROR;
    }

    /* the target may be defined further down: NGINX checks it exists */
    index = ngx_http_get_variable_index(cf, &target);
    if (index == NGX_ERROR) {
        return NGX_CONF_ERROR;
    }

    v->get_handler = ngx_http_ferrule_alias_variable;
    v->data = (uintptr_t) index;

    return NGX_CONF_OK;
}


static ngx_int_t
ngx_http_ferrule_alias_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    ngx_http_variable_value_t  *target;

    target = ngx_http_get_indexed_variable(r, data);
    if (target == NULL) {
        return NGX_ERROR;
    }

    *v = *target;

    return NGX_OK;
}
