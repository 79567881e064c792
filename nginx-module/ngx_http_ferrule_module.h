/*
 * What the parts of ngx_http_ferrule_module share: its configurations and the
 * functions one part calls in another (ngx_http_ferrule_module.c: the module,
 * its variables and the fast path; ngx_http_ferrule_metrics.c: the request
 * metrics; ngx_http_ferrule_request_id.c: $request_id;
 * ngx_http_ferrule_if_body.c: ferrule_if_body; ngx_http_ferrule_alias.c:
 * ferrule_alias; ngx_http_ferrule_upstreaminfo.c: ferrule_upstreaminfo;
 * ngx_http_ferrule_header_lines.c: ferrule_header_lines;
 * ngx_http_ferrule_headers_in.c: removing request headers,
 * ferrule_drop_lookalikes).
 */

#ifndef NGX_HTTP_FERRULE_MODULE_H
#define NGX_HTTP_FERRULE_MODULE_H

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>


/* attempts per request on distinct endpoints (the Lua balancer's 1 + 3 tries) */
#define NGX_HTTP_FERRULE_MAX_TRIES   4
/* "[ipv6]:port" */
#define NGX_HTTP_FERRULE_ADDR_LEN    (NGX_INET6_ADDRSTRLEN + sizeof("[]:65535"))
/* backend names are bounded by the Lua validator; anything longer is refused */
#define NGX_HTTP_FERRULE_NAME_MAX    1024

#define NGX_HTTP_FERRULE_OK          0
#define NGX_HTTP_FERRULE_NO_ZONE     -1
#define NGX_HTTP_FERRULE_BAD_INPUT   -2
#define NGX_HTTP_FERRULE_NO_MEMORY   -3
#define NGX_HTTP_FERRULE_NOT_FOUND   -4
#define NGX_HTTP_FERRULE_TOO_SMALL   -5
#define NGX_HTTP_FERRULE_BUSY        -6

/* the value of a lock held for writing (as ngx_rwlock's) */
#define NGX_HTTP_FERRULE_WLOCK       ((ngx_atomic_uint_t) -1)
/* how long anyone waits for the lock, in ms (a holder copies a few peers) */
#define NGX_HTTP_FERRULE_LOCK_WAIT   1000


/*
 * Eight bytes at a time (the access log's escapes, the header lines' checks):
 * whether some byte of a 64-bit word is zero, is below n (n <= 128), or is c.
 * Each is exact about whether there is one, not about which.
 */
#define NGX_HTTP_FERRULE_ONES      0x0101010101010101ULL
#define NGX_HTTP_FERRULE_HIGHS     0x8080808080808080ULL
#define ngx_http_ferrule_has_less(w, n)                                       \
    (((w) - NGX_HTTP_FERRULE_ONES * (n)) & ~(w) & NGX_HTTP_FERRULE_HIGHS)
#define ngx_http_ferrule_has_zero(w)  ngx_http_ferrule_has_less(w, 1)
#define ngx_http_ferrule_has_byte(w, c)                                       \
    ngx_http_ferrule_has_zero((w) ^ (NGX_HTTP_FERRULE_ONES * (c)))
/* whether some byte is 0x7f or above */
#define ngx_http_ferrule_has_high(w)                                          \
    (((w) | ((w) + NGX_HTTP_FERRULE_ONES)) & NGX_HTTP_FERRULE_HIGHS)


/* the per-request metrics' layout: bucket bounds (le) of the three kinds */
typedef struct {
    ngx_str_t                        text;     /* as configured: "0.005,0.01" */
    ngx_uint_t                       n;
    double                          *le;
} ngx_http_ferrule_buckets_t;


typedef struct {
    ngx_shm_zone_t                  *zone;
    ngx_shm_zone_t                  *metrics_zone;
    ngx_http_ferrule_buckets_t       time;
    ngx_http_ferrule_buckets_t       length;
    ngx_http_ferrule_buckets_t       size;
    ngx_uint_t                       slot_len;  /* counters in one slot */
    size_t                           metrics_budget; /* a location's bytes */
    ngx_uint_t                       metrics_generation; /* this config's */
    /* the locations that count (ngx_http_ferrule_loc_conf_t *), merged */
    ngx_array_t                     *metrics_locs;
    ngx_int_t                        canary_index;
    /* ferrule_input_header: the name, lowercased, its hash, and the value */
    ngx_str_t                        input_header;
    u_char                          *input_header_lowcase;
    ngx_uint_t                       input_header_hash;
    ngx_http_complex_value_t        *input_header_value;
    /* which of NGINX's pointers to headers it is (NGX_HTTP_FERRULE_UNTYPED...) */
    ngx_uint_t                       input_header_typed;
    /* some level has ferrule_drop_lookalikes */
    ngx_flag_t                       lookalikes;
    /* some location has ferrule_if_body */
    ngx_flag_t                       if_body;
} ngx_http_ferrule_main_conf_t;


/* ferrule_input_header's header among those NGINX keeps pointers to */
#define NGX_HTTP_FERRULE_UNTYPED          0
#define NGX_HTTP_FERRULE_X_REAL_IP        1
#define NGX_HTTP_FERRULE_X_FORWARDED_FOR  2


/* the values ferrule_location gives, in its arguments' order */
#define NGX_HTTP_FERRULE_BACKEND         0
#define NGX_HTTP_FERRULE_REDIRECT_HOST   1
#define NGX_HTTP_FERRULE_AFFINITY_SCOPE  2
#define NGX_HTTP_FERRULE_LOCATION_VALUES 3


typedef struct {
    /* "namespace\tingress\tservice\tpath\thost" (empty: not counted) */
    ngx_str_t                        metrics_labels;
    /* a worker's: the labels' record in the metrics zone, which it holds */
    void                            *metrics_loc;
    ngx_flag_t                       metrics_listed;
    /* ferrule_location's arguments, if `located` */
    ngx_str_t                        location[NGX_HTTP_FERRULE_LOCATION_VALUES];
    ngx_flag_t                       located;
    /* ferrule_drop_lookalikes' names, from http down (NULL: none) */
    ngx_array_t                     *lookalikes;
    ngx_flag_t                       lookalikes_dashes; /* some name has "_" */
    /* ferrule_if_body's configuration (not inherited: it is the location's) */
    void                           **if_body;
} ngx_http_ferrule_loc_conf_t;


extern ngx_module_t  ngx_http_ferrule_module;

/* ngx_http_ferrule_module.c */
void ngx_http_ferrule_variable(ngx_http_request_t *r, ngx_int_t index,
    ngx_str_t *out);
ngx_int_t ngx_http_ferrule_index(ngx_conf_t *cf, ngx_str_t *name);
ngx_int_t ngx_http_ferrule_variable_name(ngx_conf_t *cf, ngx_command_t *cmd,
    ngx_str_t *arg, ngx_str_t *name);
ngx_int_t ngx_http_ferrule_variable_arg(ngx_conf_t *cf, ngx_command_t *cmd,
    ngx_str_t *arg, ngx_str_t *defines);

/* ngx_http_ferrule_metrics.c */
ngx_int_t ngx_http_ferrule_metrics_init(ngx_conf_t *cf);
char *ngx_http_ferrule_metrics_zone(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_ferrule_metrics(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_ferrule_metrics_dump_conf(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
ngx_int_t ngx_http_ferrule_metrics_init_process(ngx_cycle_t *cycle);
void ngx_http_ferrule_metrics_exit_process(ngx_cycle_t *cycle);
/* the FFI interface of lua/ferrule/metrics.lua */
long ngx_http_ferrule_metrics_bound(void);
long ngx_http_ferrule_metrics_dump(u_char *buf, size_t size);

/* ngx_http_ferrule_alias.c */
char *ngx_http_ferrule_alias(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);

/* ngx_http_ferrule_upstreaminfo.c */
char *ngx_http_ferrule_upstreaminfo(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);

/* ngx_http_ferrule_header_lines.c */
char *ngx_http_ferrule_header_lines(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);

/* ngx_http_ferrule_headers_in.c */
typedef struct {
    ngx_list_part_t                 *prev;     /* NULL: part is the first */
    ngx_list_part_t                 *part;     /* NULL: not started */
    ngx_uint_t                       i;
} ngx_http_ferrule_cursor_t;

ngx_table_elt_t *ngx_http_ferrule_header_at(ngx_http_request_t *r,
    ngx_http_ferrule_cursor_t *c);
ngx_int_t ngx_http_ferrule_remove_header(ngx_http_request_t *r,
    ngx_http_ferrule_cursor_t *c);
char *ngx_http_ferrule_drop_lookalikes(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_ferrule_merge_lookalikes(ngx_conf_t *cf,
    ngx_http_ferrule_loc_conf_t *prev, ngx_http_ferrule_loc_conf_t *conf);
ngx_int_t ngx_http_ferrule_lookalikes_init(ngx_conf_t *cf);

/* ngx_http_ferrule_if_body.c */
char *ngx_http_ferrule_if_body(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
ngx_int_t ngx_http_ferrule_if_body_init(ngx_conf_t *cf);

/* ngx_http_ferrule_request_id.c */
ngx_int_t ngx_http_ferrule_request_id_init(ngx_conf_t *cf);

#endif /* NGX_HTTP_FERRULE_MODULE_H */
