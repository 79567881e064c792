/*
 * ngx_http_ferrule_module: the fast path of Ferrule's balancer.
 *
 *   ferrule_fast_zone SIZE;   http: shared memory holding the fast backends
 *   ferrule_fast;             upstream: after balancer_by_lua_block, before keepalive
 *   ferrule_metrics_zone SIZE TIME LENGTH SIZES;
 *                             http: per-request metrics in shared memory (below)
 *   ferrule_metrics NAMESPACE INGRESS SERVICE PATH HOST;
 *                             location, if in location: count its requests
 *                             under these labels
 *   ferrule_metrics_dump;     location: answer GET with the metrics' dump, for
 *                             a balancer without LuaJIT's FFI (njs)
 *   ferrule_location BACKEND REDIRECT_HOST AFFINITY_SCOPE;
 *                             location: the values of $ferrule_backend,
 *                             $ferrule_redirect_host and $ferrule_affinity_scope
 *                             there (below)
 *   ferrule_input_header NAME VALUE;
 *                             http: request header NAME is VALUE (variables
 *                             allowed; empty: absent) from the post-read phase
 *                             on, whatever the client sent under that name
 *   ferrule_drop_lookalikes NAME...;
 *                             http, server, location: a client's header that
 *                             is NAME once "_" reads as "-" is dropped
 *                             (ngx_http_ferrule_headers_in.c)
 *   ferrule_if_body { ... }   location: the block's directives for a request
 *                             that may carry a body (ngx_http_ferrule_if_body.c)
 *   ferrule_alias $NAME $VARIABLE...;
 *                             http: $NAME reads as the first of the variables
 *                             that is not empty, without a map's work
 *                             (ngx_http_ferrule_alias.c)
 *   ferrule_upstreaminfo $NAME $BACKEND $REQUEST_ID;
 *                             http: $NAME reads as ingress-nginx's upstreaminfo
 *                             access log line, without the log module's work
 *                             (ngx_http_ferrule_upstreaminfo.c)
 *   ferrule_header_lines $NAME $FIRST [HEADER $VARIABLE]...;
 *                             http: $NAME reads as $FIRST, then a header line
 *                             for each HEADER whose variable is not empty: one
 *                             proxy_set_header carries them all
 *                             (ngx_http_ferrule_header_lines.c)
 *
 * Loaded, the module also draws $request_id from the kernel, a page at a time
 * (ngx_http_ferrule_request_id.c).
 *
 * Every location that proxies names its backend, its ssl-redirect host and its
 * affinity scope. With `set` they cost every request the rewrite module's
 * script engine, and the map that decides whether a request has a body a
 * complex value of three variables (two of them a scan of the request's
 * headers): together about 4 % of a small proxied request
 * (test/bench/RESULTS.md). ferrule_location keeps the three values in the
 * location's configuration instead, read only when asked for, and
 * ferrule_if_body decides about the body from the parsed headers. The
 * variables stay changeable: a location that sets one with `set` (an error
 * page's, njs's) reads what it set.
 *
 * Entering balancer_by_lua costs every request about half a microsecond of Lua
 * (lua-nginx-module's context, the protected call, the address parsing), about
 * 7 % of a small proxied request (test/bench/RESULTS.md). Most backends are
 * plain round robin and need none of the Lua balancer's routing, so:
 *
 *   - the Lua configuration API (lua/ferrule/fast.lua) mirrors every plain
 *     backend (round robin: no canary, affinity, hash or EWMA) into this zone
 *     through the exported ngx_http_ferrule_fast_* functions, called with LuaJIT's
 *     FFI right after it writes the backend to its own store;
 *   - this module wraps the upstream's peer initialisation: a request whose
 *     $ferrule_backend is in the zone with at least one endpoint, and which cannot
 *     be an ssl-redirect (HTTPS, or $ferrule_redirect_host empty or without
 *     a certificate: the API mirrors the certificates' hosts too), gets its peers
 *     here; every other request (canary, affinity, 503, redirect, a backend the
 *     zone has no room for) goes to balancer_by_lua exactly as without the module.
 *
 * So the module only ever makes a decision the Lua balancer would have made for a
 * plain backend: the next endpoint in round robin, up to four attempts on
 * distinct endpoints. Peers are copied out of the zone under its lock, so a
 * concurrent update never changes a request's peers under it. It serves only
 * while the zone is known to mirror the whole Lua store (`synced`, see the zone's
 * context below): otherwise, and in old workers after a reload, Lua decides.
 */

#include "ngx_http_ferrule_module.h"


/* the address families of endpoints (ngx_sockaddr_t also holds a unix path) */
typedef union {
    struct sockaddr                  sockaddr;
    struct sockaddr_in               sockaddr_in;
#if (NGX_HAVE_INET6)
    struct sockaddr_in6              sockaddr_in6;
#endif
} ngx_http_ferrule_sockaddr_t;


typedef struct {
    ngx_http_ferrule_sockaddr_t      sockaddr;
    socklen_t                        socklen;
    ngx_str_t                        name;
    u_char                           text[NGX_HTTP_FERRULE_ADDR_LEN];
} ngx_http_ferrule_peer_t;


/* one backend in the zone; the name's bytes follow the peers */
typedef struct {
    ngx_str_node_t                   sn;
    ngx_atomic_t                     rr;       /* next start, shared by workers */
    ngx_uint_t                       npeers;
    ngx_http_ferrule_peer_t          peers[1];
} ngx_http_ferrule_node_t;


/*
 * Requests read the trees under `lock` taken for reading, so that workers do not
 * queue behind each other; writers (the API, rare) hold the slab pool's mutex for
 * allocations and take `lock` for writing only to change a tree, then free what
 * they took out once no reader can reach it. Unlike the slab mutex, NGINX's
 * master does not release this lock for a worker that died holding it: every wait
 * for it is bounded (a second), and whoever gives up sets `stuck`, after which
 * nobody waits for it again: requests go to Lua, writes fail at once and the
 * zone is never complete again, until a new zone (a restart or a new size).
 */
typedef struct {
    ngx_atomic_t                     lock;
    ngx_rbtree_t                     rbtree;      /* backends */
    ngx_rbtree_node_t                sentinel;
    ngx_rbtree_t                     tls;         /* hosts with a certificate */
    ngx_rbtree_node_t                tls_sentinel;
    /*
     * Whether the zone mirrors the whole Lua store: unset in a new zone (the
     * shared dicts outlive it across a reload), when a host did not fit, and by
     * the Lua side when a write went to another zone (an old worker's, during a
     * reload); set by the Lua side once it has mirrored the whole store
     * (ferrule.fast.resync). Until then every request goes to Lua: the fast path
     * fails closed.
     */
    ngx_atomic_t                     synced;
    ngx_atomic_t                     stuck;    /* a lock wait gave up */
    ngx_atomic_t                     epoch;    /* which zone this is */
} ngx_http_ferrule_shctx_t;


typedef struct {
    ngx_http_upstream_init_pt        original_init_upstream;
    ngx_http_upstream_init_peer_pt   original_init_peer;
    ngx_int_t                        backend_index;
    ngx_int_t                        redirect_index;
} ngx_http_ferrule_srv_conf_t;


/* a request's peers, copied from the zone */
typedef struct {
    ngx_uint_t                       npeers;
    ngx_uint_t                       next;
    ngx_http_ferrule_peer_t          peers[1];
} ngx_http_ferrule_request_t;


static void *ngx_http_ferrule_create_main_conf(ngx_conf_t *cf);
static void *ngx_http_ferrule_create_srv_conf(ngx_conf_t *cf);
static void *ngx_http_ferrule_create_loc_conf(ngx_conf_t *cf);
static char *ngx_http_ferrule_merge_loc_conf(ngx_conf_t *cf, void *parent,
    void *child);
static ngx_int_t ngx_http_ferrule_preconfiguration(ngx_conf_t *cf);
static ngx_int_t ngx_http_ferrule_postconfiguration(ngx_conf_t *cf);
static char *ngx_http_ferrule_input_header(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static ngx_int_t ngx_http_ferrule_input_header_handler(ngx_http_request_t *r);
static char *ngx_http_ferrule_location(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static ngx_int_t ngx_http_ferrule_location_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);
static char *ngx_http_ferrule_zone(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_ferrule_fast(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static ngx_int_t ngx_http_ferrule_init_zone(ngx_shm_zone_t *shm_zone,
    void *data);
static ngx_int_t ngx_http_ferrule_init_upstream(ngx_conf_t *cf,
    ngx_http_upstream_srv_conf_t *us);
static ngx_int_t ngx_http_ferrule_init_peer(ngx_http_request_t *r,
    ngx_http_upstream_srv_conf_t *us);
static ngx_int_t ngx_http_ferrule_get_peer(ngx_peer_connection_t *pc,
    void *data);
static void ngx_http_ferrule_free_peer(ngx_peer_connection_t *pc, void *data,
    ngx_uint_t state);
#if (NGX_HTTP_SSL)
static ngx_int_t ngx_http_ferrule_set_session(ngx_peer_connection_t *pc,
    void *data);
static void ngx_http_ferrule_save_session(ngx_peer_connection_t *pc,
    void *data);
#endif

/* the FFI interface of lua/ferrule/fast.lua */
int ngx_http_ferrule_fast_set(const u_char *name, size_t name_len,
    const u_char *peers, size_t peers_len);
int ngx_http_ferrule_fast_delete(const u_char *name, size_t name_len);
int ngx_http_ferrule_fast_get(const u_char *name, size_t name_len, u_char *buf,
    size_t size);
int ngx_http_ferrule_fast_tls(const u_char *host, size_t host_len, int on);
int ngx_http_ferrule_fast_synced(int set);
int ngx_http_ferrule_fast_epoch(void);
int ngx_http_ferrule_fast_reset(void);


static ngx_command_t  ngx_http_ferrule_commands[] = {

    { ngx_string("ferrule_fast_zone"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_ferrule_zone,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("ferrule_fast"),
      NGX_HTTP_UPS_CONF|NGX_CONF_NOARGS,
      ngx_http_ferrule_fast,
      NGX_HTTP_SRV_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("ferrule_metrics_zone"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE4,
      ngx_http_ferrule_metrics_zone,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    /* in "if" too: a request answered there (njs's 503) is counted with the
       block's configuration, which ferrule_metrics is not inherited into */
    { ngx_string("ferrule_metrics"),
      NGX_HTTP_LOC_CONF|NGX_HTTP_LIF_CONF|NGX_CONF_TAKE5,
      ngx_http_ferrule_metrics,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("ferrule_metrics_dump"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_http_ferrule_metrics_dump_conf,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("ferrule_location"),
      NGX_HTTP_LOC_CONF|NGX_CONF_TAKE3,
      ngx_http_ferrule_location,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("ferrule_if_body"),
      NGX_HTTP_LOC_CONF|NGX_CONF_BLOCK|NGX_CONF_NOARGS,
      ngx_http_ferrule_if_body,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("ferrule_alias"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_2MORE,
      ngx_http_ferrule_alias,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("ferrule_upstreaminfo"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE3,
      ngx_http_ferrule_upstreaminfo,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("ferrule_header_lines"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_2MORE,
      ngx_http_ferrule_header_lines,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("ferrule_input_header"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE2,
      ngx_http_ferrule_input_header,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("ferrule_drop_lookalikes"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_1MORE,
      ngx_http_ferrule_drop_lookalikes,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

      ngx_null_command
};


/*
 * Changeable: `set` still gives them a value where a location needs another one
 * (the balancer reads what it set). Not cacheable, the location's: after an
 * internal redirect they are the new location's.
 */
static ngx_http_variable_t  ngx_http_ferrule_variables[] = {

    { ngx_string("ferrule_backend"), NULL,
      ngx_http_ferrule_location_variable, NGX_HTTP_FERRULE_BACKEND,
      NGX_HTTP_VAR_CHANGEABLE|NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("ferrule_redirect_host"), NULL,
      ngx_http_ferrule_location_variable, NGX_HTTP_FERRULE_REDIRECT_HOST,
      NGX_HTTP_VAR_CHANGEABLE|NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("ferrule_affinity_scope"), NULL,
      ngx_http_ferrule_location_variable, NGX_HTTP_FERRULE_AFFINITY_SCOPE,
      NGX_HTTP_VAR_CHANGEABLE|NGX_HTTP_VAR_NOCACHEABLE, 0 },

      ngx_http_null_variable
};


static ngx_http_module_t  ngx_http_ferrule_module_ctx = {
    ngx_http_ferrule_preconfiguration,     /* preconfiguration */
    ngx_http_ferrule_postconfiguration,    /* postconfiguration */

    ngx_http_ferrule_create_main_conf,     /* create main configuration */
    NULL,                                  /* init main configuration */

    ngx_http_ferrule_create_srv_conf,      /* create server configuration */
    NULL,                                  /* merge server configuration */

    ngx_http_ferrule_create_loc_conf,      /* create location configuration */
    ngx_http_ferrule_merge_loc_conf        /* merge location configuration */
};


ngx_module_t  ngx_http_ferrule_module = {
    NGX_MODULE_V1,
    &ngx_http_ferrule_module_ctx,          /* module context */
    ngx_http_ferrule_commands,             /* module directives */
    NGX_HTTP_MODULE,                       /* module type */
    NULL,                                  /* init master */
    NULL,                                  /* init module */
    ngx_http_ferrule_metrics_init_process, /* init process */
    NULL,                                  /* init thread */
    NULL,                                  /* exit thread */
    ngx_http_ferrule_metrics_exit_process, /* exit process */
    NULL,                                  /* exit master */
    NGX_MODULE_V1_PADDING
};


static void *
ngx_http_ferrule_create_main_conf(ngx_conf_t *cf)
{
    ngx_http_ferrule_main_conf_t  *fmcf;

    fmcf = ngx_pcalloc(cf->pool, sizeof(ngx_http_ferrule_main_conf_t));
    if (fmcf == NULL) {
        return NULL;
    }

    fmcf->canary_index = NGX_ERROR;

    return fmcf;
}


static void *
ngx_http_ferrule_create_loc_conf(ngx_conf_t *cf)
{
    /* metrics_labels empty: a location without ferrule_metrics counts nothing */
    return ngx_pcalloc(cf->pool, sizeof(ngx_http_ferrule_loc_conf_t));
}


static char *
ngx_http_ferrule_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child)
{
    ngx_http_ferrule_loc_conf_t  *prev = parent;
    ngx_http_ferrule_loc_conf_t  *conf = child;

    ngx_http_ferrule_loc_conf_t   **flcf;
    ngx_http_ferrule_main_conf_t   *fmcf;

    /*
     * Inherited, so that an "if" block (a location of its own) counts its
     * requests under the labels of the location it is in. Locations are never
     * nested in one another, and server blocks name no labels, so a location
     * without ferrule_metrics still counts nothing.
     */
    if (conf->metrics_labels.len == 0) {
        conf->metrics_labels = prev->metrics_labels;
    }

    /* each configuration that counts, for the records its workers hold */
    if (conf->metrics_labels.len && !conf->metrics_listed) {
        fmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_ferrule_module);

        if (fmcf->metrics_locs == NULL) {
            fmcf->metrics_locs = ngx_array_create(cf->pool, 64,
                                      sizeof(ngx_http_ferrule_loc_conf_t *));
            if (fmcf->metrics_locs == NULL) {
                return NGX_CONF_ERROR;
            }
        }

        flcf = ngx_array_push(fmcf->metrics_locs);
        if (flcf == NULL) {
            return NGX_CONF_ERROR;
        }

        *flcf = conf;
        conf->metrics_listed = 1;
    }

    if (ngx_http_ferrule_merge_lookalikes(cf, prev, conf) != NGX_CONF_OK) {
        return NGX_CONF_ERROR;
    }

    /* the same for ferrule_location: the Lua rewrite phase runs in an "if" */
    if (!conf->located && prev->located) {
        ngx_memcpy(conf->location, prev->location, sizeof(conf->location));
        conf->located = 1;
    }

    return NGX_CONF_OK;
}


static void *
ngx_http_ferrule_create_srv_conf(ngx_conf_t *cf)
{
    ngx_http_ferrule_srv_conf_t  *conf;

    conf = ngx_pcalloc(cf->pool, sizeof(ngx_http_ferrule_srv_conf_t));
    if (conf == NULL) {
        return NULL;
    }

    conf->backend_index = NGX_ERROR;
    conf->redirect_index = NGX_ERROR;

    return conf;
}


static char *
ngx_http_ferrule_zone(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_ferrule_main_conf_t *fmcf = conf;

    ssize_t     size;
    ngx_str_t  *value, name = ngx_string("ferrule_fast");

    if (fmcf->zone) {
        return "is duplicate";
    }

    value = cf->args->elts;
    size = ngx_parse_size(&value[1]);

    if (size == NGX_ERROR || size < (ssize_t) (8 * ngx_pagesize)) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid zone size \"%V\"", &value[1]);
        return NGX_CONF_ERROR;
    }

    fmcf->zone = ngx_shared_memory_add(cf, &name, size,
                                       &ngx_http_ferrule_module);
    if (fmcf->zone == NULL) {
        return NGX_CONF_ERROR;
    }

    fmcf->zone->init = ngx_http_ferrule_init_zone;

    return NGX_CONF_OK;
}


static ngx_int_t
ngx_http_ferrule_init_zone(ngx_shm_zone_t *shm_zone, void *data)
{
    ngx_http_ferrule_shctx_t  *octx = data;

    ngx_slab_pool_t           *shpool;
    ngx_http_ferrule_shctx_t  *sh;

    if (octx) {
        /* a reload with the same size keeps the zone and what it holds */
        shm_zone->data = octx;

        if (octx->stuck && octx->lock == 0) {
            /* nobody holds the lock now: whoever waited gave up too early
             * (a holder paused, not dead); the workers resync */
            octx->synced = 0;
            octx->stuck = 0;
        }

        return NGX_OK;
    }

    shpool = (ngx_slab_pool_t *) shm_zone->shm.addr;

    if (shm_zone->shm.exists) {
        shm_zone->data = shpool->data;
        return NGX_OK;
    }

    sh = ngx_slab_calloc(shpool, sizeof(ngx_http_ferrule_shctx_t));
    if (sh == NULL) {
        return NGX_ERROR;
    }

    sh->epoch = (ngx_atomic_uint_t) ngx_random() ^ (ngx_atomic_uint_t) ngx_time();

    ngx_rbtree_init(&sh->rbtree, &sh->sentinel, ngx_str_rbtree_insert_value);
    ngx_rbtree_init(&sh->tls, &sh->tls_sentinel, ngx_str_rbtree_insert_value);

    shpool->data = sh;
    /* a full zone is reported to the caller (the backend stays on Lua) */
    shpool->log_nomem = 0;
    shm_zone->data = sh;

    return NGX_OK;
}


static ngx_int_t
ngx_http_ferrule_preconfiguration(ngx_conf_t *cf)
{
    ngx_http_variable_t  *var, *v;

    for (v = ngx_http_ferrule_variables; v->name.len; v++) {
        var = ngx_http_add_variable(cf, &v->name, v->flags);
        if (var == NULL) {
            return NGX_ERROR;
        }

        var->get_handler = v->get_handler;
        var->data = v->data;
    }

    return NGX_OK;
}


static char *
ngx_http_ferrule_location(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_ferrule_loc_conf_t *flcf = conf;

    ngx_str_t   *value;
    ngx_uint_t   i;

    if (flcf->located) {
        return "is duplicate";
    }

    value = cf->args->elts;

    for (i = 0; i < NGX_HTTP_FERRULE_LOCATION_VALUES; i++) {
        flcf->location[i] = value[i + 1];
    }

    flcf->located = 1;

    return NGX_CONF_OK;
}


/*
 * ferrule_input_header: what a request header says is decided by the
 * configuration before any other module reads it. Written for the realip module
 * (use-proxy-protocol with use-forwarded-headers): real_ip_header takes no
 * variable, so the client address comes from a header this sets. The handler
 * runs in the post-read phase before realip's (modules loaded later register
 * later and run first), and removes every copy the client sent: otherwise the
 * client's would be read first (ingress-nginx set it with headers-more in the
 * rewrite phase, after realip had read the client's own), or passed on to the
 * backend beside this one.
 *
 * NGINX reads some headers through pointers it set while parsing them
 * (r->headers_in.x_real_ip, .x_forwarded_for), and so does realip for
 * real_ip_header X-Real-IP and X-Forwarded-For: for those two the pointers are
 * set to this header (none when it is empty). Any other header NGINX parses
 * itself (Host, Content-Length, ...) would keep what NGINX derived from the
 * client's copy: such a name is refused.
 */
static char *
ngx_http_ferrule_input_header(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_ferrule_main_conf_t *fmcf = conf;

    ngx_str_t                         *value;
    ngx_uint_t                         i;
    ngx_http_compile_complex_value_t   ccv;

    if (fmcf->input_header.len) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (value[1].len == 0) {
        return "needs a header name";
    }

    for (i = 0; i < value[1].len; i++) {
        if (!((value[1].data[i] >= 'a' && value[1].data[i] <= 'z')
              || (value[1].data[i] >= 'A' && value[1].data[i] <= 'Z')
              || (value[1].data[i] >= '0' && value[1].data[i] <= '9')
              || value[1].data[i] == '-'))
        {
            return "needs a header name of letters, digits and dashes";
        }
    }

    fmcf->input_header = value[1];
    fmcf->input_header_lowcase = ngx_pnalloc(cf->pool, value[1].len);
    if (fmcf->input_header_lowcase == NULL) {
        return NGX_CONF_ERROR;
    }

    fmcf->input_header_hash = ngx_hash_strlow(fmcf->input_header_lowcase,
                                              value[1].data, value[1].len);

    fmcf->input_header_value = ngx_palloc(cf->pool,
                                          sizeof(ngx_http_complex_value_t));
    if (fmcf->input_header_value == NULL) {
        return NGX_CONF_ERROR;
    }

    ngx_memzero(&ccv, sizeof(ngx_http_compile_complex_value_t));
    ccv.cf = cf;
    ccv.value = &value[2];
    ccv.complex_value = fmcf->input_header_value;

    if (ngx_http_compile_complex_value(&ccv) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


/* which of NGINX's pointers to headers is ferrule_input_header's (postconfiguration,
 * once NGINX's table of the headers it parses exists) */
static ngx_int_t
ngx_http_ferrule_input_header_typed(ngx_conf_t *cf,
    ngx_http_ferrule_main_conf_t *fmcf)
{
    ngx_http_header_t          *hh;
    ngx_http_core_main_conf_t  *cmcf;

    cmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_core_module);

    hh = ngx_hash_find(&cmcf->headers_in_hash, fmcf->input_header_hash,
                       fmcf->input_header_lowcase, fmcf->input_header.len);

    if (hh == NULL) {
        /* a header NGINX does not parse: read by name only */
        fmcf->input_header_typed = NGX_HTTP_FERRULE_UNTYPED;
        return NGX_OK;
    }

#if (NGX_HTTP_REALIP)
    if (hh->offset == offsetof(ngx_http_headers_in_t, x_real_ip)) {
        fmcf->input_header_typed = NGX_HTTP_FERRULE_X_REAL_IP;
        return NGX_OK;
    }
#endif

#if (NGX_HTTP_X_FORWARDED_FOR)
    if (hh->offset == offsetof(ngx_http_headers_in_t, x_forwarded_for)) {
        fmcf->input_header_typed = NGX_HTTP_FERRULE_X_FORWARDED_FOR;
        return NGX_OK;
    }
#endif

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "ferrule_input_header: NGINX parses \"%V\" itself; "
                       "of those headers only X-Real-IP and X-Forwarded-For "
                       "can be set", &fmcf->input_header);
    return NGX_ERROR;
}


static ngx_int_t
ngx_http_ferrule_input_header_handler(ngx_http_request_t *r)
{
    ngx_str_t                      value;
    ngx_table_elt_t               *h;
    ngx_http_ferrule_cursor_t      c;
    ngx_http_ferrule_main_conf_t  *fmcf;
#if (NGX_HTTP_X_FORWARDED_FOR && nginx_version < 1023000)
    ngx_array_t                   *xfwd;
    ngx_table_elt_t              **ph;
#endif

    fmcf = ngx_http_get_module_main_conf(r, ngx_http_ferrule_module);

    if (r != r->main || fmcf->input_header.len == 0) {
        return NGX_DECLINED;
    }

    /* before the client's copies go: the value may read them */
    if (ngx_http_complex_value(r, fmcf->input_header_value, &value) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_memzero(&c, sizeof(ngx_http_ferrule_cursor_t));

    while ((h = ngx_http_ferrule_header_at(r, &c)) != NULL) {

        if (h->key.len == fmcf->input_header.len
            && ngx_strncasecmp(h->key.data, fmcf->input_header.data,
                               fmcf->input_header.len) == 0)
        {
            if (ngx_http_ferrule_remove_header(r, &c) != NGX_OK) {
                return NGX_HTTP_INTERNAL_SERVER_ERROR;
            }

            continue;
        }

        c.i++;
    }

    h = NULL;

    if (value.len) {
        h = ngx_list_push(&r->headers_in.headers);
        if (h == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        h->hash = fmcf->input_header_hash;
        h->key = fmcf->input_header;
        h->lowcase_key = fmcf->input_header_lowcase;
        h->value = value;
#if (nginx_version >= 1023000)
        h->next = NULL;
#endif
    }

    /* NGINX's pointers to the client's copies: this one's now */
    switch (fmcf->input_header_typed) {

#if (NGX_HTTP_REALIP)
    case NGX_HTTP_FERRULE_X_REAL_IP:
        r->headers_in.x_real_ip = h;
        break;
#endif

#if (NGX_HTTP_X_FORWARDED_FOR)
    case NGX_HTTP_FERRULE_X_FORWARDED_FOR:
#if (nginx_version < 1023000)
        xfwd = &r->headers_in.x_forwarded_for;
        xfwd->nelts = 0;

        if (h == NULL) {
            break;
        }

        if (xfwd->elts == NULL
            && ngx_array_init(xfwd, r->pool, 1, sizeof(ngx_table_elt_t *))
               != NGX_OK)
        {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        ph = ngx_array_push(xfwd);
        if (ph == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        *ph = h;
#else
        r->headers_in.x_forwarded_for = h;
#endif
        break;
#endif

    default:
        break;
    }

    return NGX_DECLINED;
}


static ngx_int_t
ngx_http_ferrule_postconfiguration(ngx_conf_t *cf)
{
    ngx_http_handler_pt           *h;
    ngx_http_core_main_conf_t     *cmcf;
    ngx_http_ferrule_main_conf_t  *fmcf;

    fmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_ferrule_module);

    if (fmcf->input_header.len) {
        if (ngx_http_ferrule_input_header_typed(cf, fmcf) != NGX_OK) {
            return NGX_ERROR;
        }

        cmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_core_module);

        h = ngx_array_push(&cmcf->phases[NGX_HTTP_POST_READ_PHASE].handlers);
        if (h == NULL) {
            return NGX_ERROR;
        }

        *h = ngx_http_ferrule_input_header_handler;
    }

    if (ngx_http_ferrule_request_id_init(cf) != NGX_OK
        || ngx_http_ferrule_if_body_init(cf) != NGX_OK
        || ngx_http_ferrule_lookalikes_init(cf) != NGX_OK)
    {
        return NGX_ERROR;
    }

    return ngx_http_ferrule_metrics_init(cf);
}


/* a ferrule_location value; not found in a location without the directive */
static ngx_int_t
ngx_http_ferrule_location_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    ngx_http_ferrule_loc_conf_t  *flcf;

    flcf = ngx_http_get_module_loc_conf(r, ngx_http_ferrule_module);

    if (!flcf->located) {
        v->not_found = 1;
        return NGX_OK;
    }

    v->len = flcf->location[data].len;
    v->data = flcf->location[data].data;
    v->valid = 1;
    v->no_cacheable = 0;
    v->not_found = 0;

    return NGX_OK;
}


/* a variable the locations `set`; one no location sets reads as not found */
static ngx_int_t
ngx_http_ferrule_unset_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    v->not_found = 1;
    return NGX_OK;
}


ngx_int_t
ngx_http_ferrule_index(ngx_conf_t *cf, ngx_str_t *name)
{
    ngx_http_variable_t  *v;

    v = ngx_http_add_variable(cf, name, NGX_HTTP_VAR_CHANGEABLE);
    if (v == NULL) {
        return NGX_ERROR;
    }

    if (v->get_handler == NULL) {
        v->get_handler = ngx_http_ferrule_unset_variable;
    }

    return ngx_http_get_variable_index(cf, name);
}


/* the variable a directive's argument names ("$name"), logged where it names none */
ngx_int_t
ngx_http_ferrule_variable_name(ngx_conf_t *cf, ngx_command_t *cmd,
    ngx_str_t *arg, ngx_str_t *name)
{
    if (arg->len < 2 || arg->data[0] != '$') {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "%V takes variables, not \"%V\"", &cmd->name, arg);
        return NGX_ERROR;
    }

    name->len = arg->len - 1;
    name->data = arg->data + 1;

    return NGX_OK;
}


/*
 * The index of the variable `arg` names, for a directive that defines
 * `defines` from it: NGX_ERROR (logged) if it names none, or that one. A
 * variable defined further down will do: NGINX checks that it exists.
 */
ngx_int_t
ngx_http_ferrule_variable_arg(ngx_conf_t *cf, ngx_command_t *cmd,
    ngx_str_t *arg, ngx_str_t *defines)
{
    ngx_str_t  name;

    if (ngx_http_ferrule_variable_name(cf, cmd, arg, &name) != NGX_OK) {
        return NGX_ERROR;
    }

    if (name.len == defines->len
        && ngx_strncasecmp(name.data, defines->data, name.len) == 0)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "%V: \"%V\" names the variable it defines",
                           &cmd->name, arg);
        return NGX_ERROR;
    }

    return ngx_http_get_variable_index(cf, &name);
}


static char *
ngx_http_ferrule_fast(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_ferrule_srv_conf_t *fscf = conf;

    ngx_str_t                      name;
    ngx_http_upstream_srv_conf_t  *uscf;

    if (fscf->original_init_upstream) {
        return "is duplicate";
    }

    uscf = ngx_http_conf_get_module_srv_conf(cf, ngx_http_upstream_module);

    if (uscf->peer.init_upstream == NULL) {
        /* without a balancer_by_lua_block before it nothing can take the
         * requests this module declines */
        return "must follow balancer_by_lua_block";
    }

    fscf->original_init_upstream = uscf->peer.init_upstream;
    uscf->peer.init_upstream = ngx_http_ferrule_init_upstream;

    ngx_str_set(&name, "ferrule_backend");
    fscf->backend_index = ngx_http_ferrule_index(cf, &name);
    if (fscf->backend_index == NGX_ERROR) {
        return NGX_CONF_ERROR;
    }

    ngx_str_set(&name, "ferrule_redirect_host");
    fscf->redirect_index = ngx_http_ferrule_index(cf, &name);
    if (fscf->redirect_index == NGX_ERROR) {
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


static ngx_int_t
ngx_http_ferrule_init_upstream(ngx_conf_t *cf, ngx_http_upstream_srv_conf_t *us)
{
    ngx_http_ferrule_srv_conf_t  *fscf;

    fscf = ngx_http_conf_upstream_srv_conf(us, ngx_http_ferrule_module);

    if (fscf->original_init_upstream(cf, us) != NGX_OK) {
        return NGX_ERROR;
    }

    fscf->original_init_peer = us->peer.init;
    us->peer.init = ngx_http_ferrule_init_peer;

    return NGX_OK;
}


/* a monotonic clock in ms: NGINX's cached time does not move while we spin */
static ngx_msec_t
ngx_http_ferrule_clock(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);

    return (ngx_msec_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}


/*
 * Takes the zone's lock for reading (`write` 0) or writing; NGX_BUSY when it is
 * stuck, or becomes so: held for longer than any holder needs, by a worker that
 * died.
 */
static ngx_int_t
ngx_http_ferrule_lock(ngx_http_ferrule_shctx_t *sh, ngx_uint_t write)
{
    ngx_uint_t         i;
    ngx_msec_t         start;
    ngx_atomic_uint_t  readers;

    start = 0;

    for (i = 0; !sh->stuck; i++) {
        readers = sh->lock;

        if (write) {
            if (readers == 0
                && ngx_atomic_cmp_set(&sh->lock, 0, NGX_HTTP_FERRULE_WLOCK))
            {
                return NGX_OK;
            }

        } else if (readers != NGX_HTTP_FERRULE_WLOCK
                   && ngx_atomic_cmp_set(&sh->lock, readers, readers + 1))
        {
            return NGX_OK;
        }

        if ((i & 1023) != 1023) {
            ngx_cpu_pause();
            continue;
        }

        if (start == 0) {
            start = ngx_http_ferrule_clock();

        } else if (ngx_http_ferrule_clock() - start > NGX_HTTP_FERRULE_LOCK_WAIT) {
            sh->stuck = 1;
            sh->synced = 0;
            ngx_log_error(NGX_LOG_ALERT, ngx_cycle->log, 0,
                          "ferrule fast path: its zone's lock is stuck "
                          "(a worker died holding it): every request goes to "
                          "the Lua balancer from now on");
            break;
        }

        ngx_sched_yield();
    }

    return NGX_BUSY;
}


/* the value of an indexed variable, or an empty string */
void
ngx_http_ferrule_variable(ngx_http_request_t *r, ngx_int_t index,
    ngx_str_t *out)
{
    ngx_http_variable_value_t  *v;

    out->len = 0;
    out->data = NULL;

    v = ngx_http_get_indexed_variable(r, index);
    if (v == NULL || v->not_found) {
        return;
    }

    out->len = v->len;
    out->data = v->data;
}


/*
 * The request's peers from the zone: NGX_OK, or NGX_DECLINED when the Lua
 * balancer must decide (NGX_ERROR: no memory).
 */
static ngx_int_t
ngx_http_ferrule_take(ngx_http_request_t *r, ngx_http_ferrule_srv_conf_t *fscf,
    ngx_http_ferrule_request_t **out)
{
    uint32_t                       backend_hash, redirect_hash;
    ngx_str_t                      backend, redirect;
    ngx_uint_t                     i, n, start;
    ngx_http_ferrule_node_t       *node;
    ngx_http_ferrule_shctx_t      *sh;
    ngx_http_ferrule_request_t    *fr;
    ngx_http_ferrule_main_conf_t  *fmcf;

    if (ngx_exiting) {
        /* an old worker after a reload: its zone may be one nobody updates
         * any more (a new size), while Lua reads the current store */
        return NGX_DECLINED;
    }

    fmcf = ngx_http_get_module_main_conf(r, ngx_http_ferrule_module);
    if (fmcf->zone == NULL || fmcf->zone->data == NULL) {
        return NGX_DECLINED;
    }

    redirect.len = 0;

#if (NGX_HTTP_SSL)
    if (r->connection->ssl == NULL)
#endif
    {
        /* plain HTTP on a host whose ssl-redirect applies if it has TLS */
        ngx_http_ferrule_variable(r, fscf->redirect_index, &redirect);
    }

    ngx_http_ferrule_variable(r, fscf->backend_index, &backend);
    if (backend.len == 0 || backend.len > NGX_HTTP_FERRULE_NAME_MAX) {
        return NGX_DECLINED;
    }

    sh = fmcf->zone->data;
    if (!sh->synced) {
        return NGX_DECLINED;
    }

    /* the largest copy, allocated before the lock (which stays short) */
    fr = ngx_palloc(r->pool, offsetof(ngx_http_ferrule_request_t, peers)
                    + NGX_HTTP_FERRULE_MAX_TRIES
                      * sizeof(ngx_http_ferrule_peer_t));
    if (fr == NULL) {
        return NGX_ERROR;
    }

    /* the trees' keys: any hash will do, and crc32 was a third of this path */
    backend_hash = ngx_hash_key(backend.data, backend.len);
    redirect_hash = redirect.len ? ngx_hash_key(redirect.data, redirect.len) : 0;

    if (ngx_http_ferrule_lock(sh, 0) != NGX_OK) {
        return NGX_DECLINED;
    }

    if (!sh->synced
        || (redirect.len
            && ngx_str_rbtree_lookup(&sh->tls, &redirect, redirect_hash)))
    {
        /* not a complete mirror; or a redirect: the Lua balancer answers it
         * (and knows whether the rewrite phase already decided) */
        ngx_rwlock_unlock(&sh->lock);
        return NGX_DECLINED;
    }

    node = (ngx_http_ferrule_node_t *)
           ngx_str_rbtree_lookup(&sh->rbtree, &backend, backend_hash);

    if (node == NULL || node->npeers == 0) {
        ngx_rwlock_unlock(&sh->lock);
        return NGX_DECLINED;
    }

    n = ngx_min(node->npeers, NGX_HTTP_FERRULE_MAX_TRIES);
    start = ngx_atomic_fetch_add(&node->rr, 1) % node->npeers;

    for (i = 0; i < n; i++) {
        fr->peers[i] = node->peers[(start + i) % node->npeers];
    }

    ngx_rwlock_unlock(&sh->lock);

    for (i = 0; i < n; i++) {
        /* the copy names itself, not the zone's text */
        fr->peers[i].name.data = fr->peers[i].text;
    }

    fr->npeers = n;
    fr->next = 0;
    *out = fr;

    return NGX_OK;
}


static ngx_int_t
ngx_http_ferrule_init_peer(ngx_http_request_t *r,
    ngx_http_upstream_srv_conf_t *us)
{
    ngx_int_t                     rc;
    ngx_http_upstream_t          *u;
    ngx_http_ferrule_request_t   *fr;
    ngx_http_ferrule_srv_conf_t  *fscf;

    fscf = ngx_http_conf_upstream_srv_conf(us, ngx_http_ferrule_module);

    rc = ngx_http_ferrule_take(r, fscf, &fr);

    if (rc == NGX_DECLINED) {
        return fscf->original_init_peer(r, us);
    }

    if (rc != NGX_OK) {
        return NGX_ERROR;
    }

    u = r->upstream;

    u->peer.data = fr;
    u->peer.get = ngx_http_ferrule_get_peer;
    u->peer.free = ngx_http_ferrule_free_peer;
    u->peer.notify = NULL;
    u->peer.tries = fr->npeers;
#if (NGX_HTTP_SSL)
    u->peer.set_session = ngx_http_ferrule_set_session;
    u->peer.save_session = ngx_http_ferrule_save_session;
#endif

    return NGX_OK;
}


static ngx_int_t
ngx_http_ferrule_get_peer(ngx_peer_connection_t *pc, void *data)
{
    ngx_http_ferrule_request_t *fr = data;

    ngx_http_ferrule_peer_t  *peer;

    /*
     * NGINX adds a try of its own when a kept-alive connection fails, so the
     * attempts may outnumber the peers: they go round again.
     */
    peer = &fr->peers[fr->next++ % fr->npeers];

    pc->sockaddr = &peer->sockaddr.sockaddr;
    pc->socklen = peer->socklen;
    pc->name = &peer->name;
    pc->cached = 0;
    pc->connection = NULL;

    return NGX_OK;
}


static void
ngx_http_ferrule_free_peer(ngx_peer_connection_t *pc, void *data,
    ngx_uint_t state)
{
    if (pc->tries) {
        pc->tries--;
    }
}


#if (NGX_HTTP_SSL)

/* no session reuse towards HTTPS backends: as the Lua balancer */

static ngx_int_t
ngx_http_ferrule_set_session(ngx_peer_connection_t *pc, void *data)
{
    return NGX_OK;
}


static void
ngx_http_ferrule_save_session(ngx_peer_connection_t *pc, void *data)
{
}

#endif


/* what every FFI call works on: the running configuration's zone and a key */
typedef struct {
    ngx_slab_pool_t                 *shpool;
    ngx_http_ferrule_shctx_t        *sh;
    ngx_str_t                        key;
    uint32_t                         hash;
} ngx_http_ferrule_call_t;


/* FFI callers have no request: the zone of the configuration the worker runs */
static ngx_shm_zone_t *
ngx_http_ferrule_running_zone(void)
{
    ngx_http_ferrule_main_conf_t  *fmcf;

    fmcf = ngx_http_cycle_get_module_main_conf(ngx_cycle,
                                               ngx_http_ferrule_module);
    if (fmcf == NULL || fmcf->zone == NULL || fmcf->zone->data == NULL) {
        return NULL;
    }

    return fmcf->zone;
}


static int
ngx_http_ferrule_call(ngx_http_ferrule_call_t *call, const u_char *name,
    size_t len)
{
    ngx_shm_zone_t  *zone;

    zone = ngx_http_ferrule_running_zone();
    if (zone == NULL) {
        return NGX_HTTP_FERRULE_NO_ZONE;
    }

    if (len == 0 || len > NGX_HTTP_FERRULE_NAME_MAX) {
        return NGX_HTTP_FERRULE_BAD_INPUT;
    }

    call->shpool = (ngx_slab_pool_t *) zone->shm.addr;
    call->sh = zone->data;

    if (call->sh->stuck) {
        return NGX_HTTP_FERRULE_BUSY;
    }

    call->key.data = (u_char *) name;
    call->key.len = len;
    call->hash = ngx_hash_key(call->key.data, call->key.len);

    return NGX_HTTP_FERRULE_OK;
}


/*
 * Takes the call's key out of `tree` and puts `node` in, if given, under the
 * write lock so that no reader sees the tree change; frees what was taken out
 * (the caller holds the slab mutex). When the lock cannot be had, frees `node`
 * instead and unsets `synced`: the zone may now be stale.
 */
static int
ngx_http_ferrule_swap(ngx_http_ferrule_call_t *call, ngx_rbtree_t *tree,
    ngx_str_node_t *node)
{
    ngx_str_node_t  *old;

    if (ngx_http_ferrule_lock(call->sh, 1) != NGX_OK) {
        if (node) {
            ngx_slab_free_locked(call->shpool, node);
        }
        return NGX_HTTP_FERRULE_BUSY;
    }

    old = ngx_str_rbtree_lookup(tree, &call->key, call->hash);
    if (old) {
        ngx_rbtree_delete(tree, &old->node);
    }

    if (node) {
        ngx_rbtree_insert(tree, &node->node);
    }

    ngx_rwlock_unlock(&call->sh->lock);

    if (old) {
        ngx_slab_free_locked(call->shpool, old);
    }

    return NGX_HTTP_FERRULE_OK;
}


/* "address:port", the address an IPv4 or bracketed IPv6 literal */
static ngx_int_t
ngx_http_ferrule_parse_peer(u_char *p, size_t len, ngx_http_ferrule_peer_t *peer)
{
    u_char               *c, *colon;
    ngx_int_t             port;
    in_addr_t             inaddr;
    struct sockaddr_in   *sin;
#if (NGX_HAVE_INET6)
    struct sockaddr_in6  *sin6;
#endif

    colon = NULL;
    for (c = p + len; c > p; c--) {
        if (c[-1] == ':') {
            colon = c - 1;
            break;
        }
    }

    if (colon == NULL || colon == p || (size_t) (p + len - colon) < 2) {
        return NGX_ERROR;
    }

    port = ngx_atoi(colon + 1, p + len - colon - 1);
    if (port < 1 || port > 65535) {
        return NGX_ERROR;
    }

    ngx_memzero(peer, sizeof(ngx_http_ferrule_peer_t));

    if (p[0] == '[') {
#if (NGX_HAVE_INET6)
        if (colon - p < 3 || colon[-1] != ']') {
            return NGX_ERROR;
        }

        sin6 = &peer->sockaddr.sockaddr_in6;
        if (ngx_inet6_addr(p + 1, colon - p - 2, sin6->sin6_addr.s6_addr)
            != NGX_OK)
        {
            return NGX_ERROR;
        }

        sin6->sin6_family = AF_INET6;
        sin6->sin6_port = htons((in_port_t) port);
        peer->socklen = sizeof(struct sockaddr_in6);
#else
        return NGX_ERROR;
#endif

    } else {
        inaddr = ngx_inet_addr(p, colon - p);
        if (inaddr == INADDR_NONE) {
            return NGX_ERROR;
        }

        sin = &peer->sockaddr.sockaddr_in;
        sin->sin_family = AF_INET;
        sin->sin_addr.s_addr = inaddr;
        sin->sin_port = htons((in_port_t) port);
        peer->socklen = sizeof(struct sockaddr_in);
    }

    peer->name.len = ngx_sock_ntop(&peer->sockaddr.sockaddr, peer->socklen,
                                   peer->text, sizeof(peer->text), 1);
    peer->name.data = peer->text;

    return NGX_OK;
}


/*
 * Sets backend `name` to the space-separated "address:port" list `peers`
 * (empty: no endpoints). On any failure the backend is no longer in the zone,
 * so that its requests go to the Lua balancer rather than to old peers.
 */
int
ngx_http_ferrule_fast_set(const u_char *name, size_t name_len,
    const u_char *peers, size_t peers_len)
{
    int                       rc;
    u_char                   *p, *end, *tok;
    size_t                    size;
    ngx_uint_t                n, i;
    ngx_http_ferrule_call_t   call;
    ngx_http_ferrule_node_t  *node;

    rc = ngx_http_ferrule_call(&call, name, name_len);
    if (rc != NGX_HTTP_FERRULE_OK) {
        return rc;
    }

    /* count the peers: the node is one allocation */
    n = 0;
    end = (u_char *) peers + peers_len;
    for (p = (u_char *) peers; p < end; /* void */) {
        while (p < end && *p == ' ') {
            p++;
        }
        if (p == end) {
            break;
        }
        n++;
        while (p < end && *p != ' ') {
            p++;
        }
    }

    if (n > (NGX_MAX_SIZE_T_VALUE - name_len) / sizeof(ngx_http_ferrule_peer_t)
             - 1)
    {
        return NGX_HTTP_FERRULE_BAD_INPUT;
    }

    size = offsetof(ngx_http_ferrule_node_t, peers)
           + n * sizeof(ngx_http_ferrule_peer_t) + name_len;

    ngx_shmtx_lock(&call.shpool->mutex);

    node = ngx_slab_alloc_locked(call.shpool, size);

    if (node) {
        i = 0;
        for (p = (u_char *) peers; p < end && i < n; /* void */) {
            while (p < end && *p == ' ') {
                p++;
            }
            tok = p;
            while (p < end && *p != ' ') {
                p++;
            }
            if (ngx_http_ferrule_parse_peer(tok, p - tok, &node->peers[i])
                != NGX_OK)
            {
                ngx_slab_free_locked(call.shpool, node);
                node = NULL;
                rc = NGX_HTTP_FERRULE_BAD_INPUT;
                break;
            }
            i++;
        }

    } else {
        rc = NGX_HTTP_FERRULE_NO_MEMORY;
    }

    if (node) {
        node->npeers = n;
        /* workers and old lists do not start in step */
        node->rr = ngx_random();
        node->sn.str.len = name_len;
        node->sn.str.data = (u_char *) &node->peers[n];
        ngx_memcpy(node->sn.str.data, name, name_len);
        node->sn.node.key = call.hash;
    }

    if (ngx_http_ferrule_swap(&call, &call.sh->rbtree, node ? &node->sn : NULL)
        != NGX_HTTP_FERRULE_OK)
    {
        rc = NGX_HTTP_FERRULE_BUSY;
    }

    ngx_shmtx_unlock(&call.shpool->mutex);

    return rc;
}


int
ngx_http_ferrule_fast_delete(const u_char *name, size_t name_len)
{
    int                       rc;
    ngx_http_ferrule_call_t   call;

    rc = ngx_http_ferrule_call(&call, name, name_len);
    if (rc != NGX_HTTP_FERRULE_OK) {
        return rc;
    }

    ngx_shmtx_lock(&call.shpool->mutex);
    rc = ngx_http_ferrule_swap(&call, &call.sh->rbtree, NULL);
    ngx_shmtx_unlock(&call.shpool->mutex);

    return rc;
}


/*
 * Writes backend `name`'s peers, space-separated, into `buf` (the debug API):
 * the length written, or NOT_FOUND, NO_ZONE, TOO_SMALL.
 */
int
ngx_http_ferrule_fast_get(const u_char *name, size_t name_len, u_char *buf,
    size_t size)
{
    int                       rc;
    u_char                   *p, *last;
    ngx_uint_t                i;
    ngx_http_ferrule_call_t   call;
    ngx_http_ferrule_node_t  *node;

    rc = ngx_http_ferrule_call(&call, name, name_len);
    if (rc != NGX_HTTP_FERRULE_OK) {
        return rc;
    }

    p = buf;
    last = buf + size;
    rc = NGX_HTTP_FERRULE_NOT_FOUND;

    if (ngx_http_ferrule_lock(call.sh, 0) != NGX_OK) {
        return NGX_HTTP_FERRULE_BUSY;
    }

    node = (ngx_http_ferrule_node_t *)
           ngx_str_rbtree_lookup(&call.sh->rbtree, &call.key, call.hash);
    if (node) {
        rc = NGX_HTTP_FERRULE_OK;
        for (i = 0; i < node->npeers; i++) {
            if ((size_t) (last - p) < node->peers[i].name.len + 1) {
                rc = NGX_HTTP_FERRULE_TOO_SMALL;
                break;
            }
            if (i) {
                *p++ = ' ';
            }
            p = ngx_cpymem(p, node->peers[i].text, node->peers[i].name.len);
        }
    }

    ngx_rwlock_unlock(&call.sh->lock);

    return rc == NGX_HTTP_FERRULE_OK ? (int) (p - buf) : rc;
}


/*
 * Records whether `host` (a server name as $ferrule_redirect_host holds it) has
 * a certificate: its plain HTTP requests are then ssl-redirects, for Lua.
 * Failing to record one (NO_MEMORY) sends every request that might redirect to
 * Lua from then on.
 */
int
ngx_http_ferrule_fast_tls(const u_char *host, size_t host_len, int on)
{
    int                       rc;
    ngx_str_node_t           *sn;
    ngx_http_ferrule_call_t   call;

    rc = ngx_http_ferrule_call(&call, host, host_len);
    if (rc != NGX_HTTP_FERRULE_OK) {
        return rc;
    }

    sn = NULL;

    ngx_shmtx_lock(&call.shpool->mutex);

    if (on) {
        sn = ngx_slab_alloc_locked(call.shpool,
                                   sizeof(ngx_str_node_t) + host_len);
        if (sn == NULL) {
            /* unknown hosts may have TLS now: every request goes to Lua
             * until the Lua side mirrors the whole store again */
            call.sh->synced = 0;
            ngx_shmtx_unlock(&call.shpool->mutex);
            return NGX_HTTP_FERRULE_NO_MEMORY;
        }

        sn->str.len = host_len;
        sn->str.data = (u_char *) (sn + 1);
        ngx_memcpy(sn->str.data, host, host_len);
        sn->node.key = call.hash;
    }

    rc = ngx_http_ferrule_swap(&call, &call.sh->tls, sn);
    ngx_shmtx_unlock(&call.shpool->mutex);

    return rc;
}


/*
 * Whether the zone mirrors the whole Lua store (see `synced`): 1 or 0, after
 * setting it to `set` when that is 0 or 1 (-1 only reads it); or NO_ZONE, BUSY.
 */
int
ngx_http_ferrule_fast_synced(int set)
{
    ngx_shm_zone_t            *zone;
    ngx_http_ferrule_shctx_t  *sh;

    zone = ngx_http_ferrule_running_zone();
    if (zone == NULL) {
        return NGX_HTTP_FERRULE_NO_ZONE;
    }

    sh = zone->data;

    if (set == 0) {
        sh->synced = 0;

    } else if (set == 1) {
        /* not in the middle of a writer's change */
        if (ngx_http_ferrule_lock(sh, 1) != NGX_OK) {
            return NGX_HTTP_FERRULE_BUSY;
        }
        /* another process may have given up on the lock meanwhile */
        sh->synced = !sh->stuck;
        ngx_rwlock_unlock(&sh->lock);
    }

    return (sh->synced && !sh->stuck) ? 1 : 0;
}


/* Which zone this is: a number that differs from the previous zone's. */
int
ngx_http_ferrule_fast_epoch(void)
{
    ngx_shm_zone_t  *zone;

    zone = ngx_http_ferrule_running_zone();
    if (zone == NULL) {
        return NGX_HTTP_FERRULE_NO_ZONE;
    }

    return (int) (((ngx_http_ferrule_shctx_t *) zone->data)->epoch & 0x7fffffff);
}


/* frees every node of `tree`; the caller holds the slab mutex and the write lock */
static void
ngx_http_ferrule_empty_locked(ngx_slab_pool_t *shpool, ngx_rbtree_t *tree)
{
    ngx_rbtree_node_t  *node;

    while (tree->root != tree->sentinel) {
        node = tree->root;
        ngx_rbtree_delete(tree, node);
        /* the node is the start of its allocation (ngx_str_node_t first) */
        ngx_slab_free_locked(shpool, node);
    }
}


/*
 * Empties the zone and marks it incomplete: a resync starts from nothing, so
 * that what the store no longer has (an old worker's removal during a reload)
 * does not stay behind.
 */
int
ngx_http_ferrule_fast_reset(void)
{
    ngx_shm_zone_t            *zone;
    ngx_slab_pool_t           *shpool;
    ngx_http_ferrule_shctx_t  *sh;

    zone = ngx_http_ferrule_running_zone();
    if (zone == NULL) {
        return NGX_HTTP_FERRULE_NO_ZONE;
    }

    sh = zone->data;
    shpool = (ngx_slab_pool_t *) zone->shm.addr;

    sh->synced = 0;

    ngx_shmtx_lock(&shpool->mutex);

    if (ngx_http_ferrule_lock(sh, 1) != NGX_OK) {
        ngx_shmtx_unlock(&shpool->mutex);
        return NGX_HTTP_FERRULE_BUSY;
    }

    ngx_http_ferrule_empty_locked(shpool, &sh->rbtree);
    ngx_http_ferrule_empty_locked(shpool, &sh->tls);

    ngx_rwlock_unlock(&sh->lock);
    ngx_shmtx_unlock(&shpool->mutex);

    return NGX_HTTP_FERRULE_OK;
}
