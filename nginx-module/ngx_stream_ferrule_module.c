/*
 * ngx_stream_ferrule_module: the peers of TCP/UDP services and ssl-passthrough
 * hosts, with retries.
 *
 *   ferrule_stream_peers DIR $VARIABLE;
 *                             stream upstream: a connection's peers are those
 *                             of the backend $VARIABLE names, read from
 *                             DIR/<backend>.json
 *
 * The controller writes one peers file per stream backend (controller/src/
 * nginx/stream_peers.rs, replaced atomically when its endpoints change):
 * {"backend":"NAME","peers":["addr:port","[v6]:port",...]}. njs/stream.js
 * picks one peer per connection from it, which NGINX's proxy_pass of a
 * variable connects to once: a dead endpoint fails the connection. This
 * module gives the upstream every peer instead, starting at the next in round
 * robin, so that proxy_next_upstream, _tries and _timeout (ConfigMap
 * proxy-stream-next-upstream*) move a failed connection to the next one, as
 * ingress-nginx's Lua stream balancer does.
 *
 * A worker keeps each file's peers and reads the file again when its inode,
 * size or modification time changes: one stat() per connection, where njs
 * reads and parses the file every time. It also keeps the file open: the
 * controller replaces a file by rename, and a freed inode is soon given to the
 * next file, which, written in the same clock tick with peers of the same
 * length, would look unchanged. An inode still open is never reused.
 */

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_stream.h>


/* as njs/stream.js: namespace_service_port[_udp], DNS labels and "_" */
#define NGX_STREAM_FERRULE_NAME_MAX  1024
/* a peers file larger than this is refused (100k endpoints fit) */
#define NGX_STREAM_FERRULE_FILE_MAX  (8 * 1024 * 1024)
/* peers a connection may try (proxy_next_upstream_tries 0 means all: this) */
#define NGX_STREAM_FERRULE_MAX_TRIES 32


typedef struct {
    ngx_str_t                        dir;
    ngx_int_t                        index;     /* the backend's variable */
    ngx_stream_upstream_init_pt      original_init_upstream;
} ngx_stream_ferrule_srv_conf_t;


/* a worker's copy of one peers file */
typedef struct {
    ngx_str_node_t                   sn;        /* the backend's name */
    ngx_pool_t                      *pool;      /* the peers, the name */
    ngx_fd_t                         fd;        /* held: its inode stays */
    ngx_file_uniq_t                  uniq;
    time_t                           mtime;
    off_t                            size;
    ngx_uint_t                       rr;        /* next start */
    ngx_uint_t                       npeers;
    ngx_addr_t                      *peers;
} ngx_stream_ferrule_backend_t;


/* a connection's peers: the next ones in round robin, at most MAX_TRIES */
typedef struct {
    ngx_uint_t                       npeers;
    ngx_uint_t                       next;
    ngx_addr_t                      *peers;
} ngx_stream_ferrule_session_t;


static void *ngx_stream_ferrule_create_srv_conf(ngx_conf_t *cf);
static char *ngx_stream_ferrule_peers(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static ngx_int_t ngx_stream_ferrule_init_upstream(ngx_conf_t *cf,
    ngx_stream_upstream_srv_conf_t *us);
static ngx_int_t ngx_stream_ferrule_init_peer(ngx_stream_session_t *s,
    ngx_stream_upstream_srv_conf_t *us);
static ngx_int_t ngx_stream_ferrule_get_peer(ngx_peer_connection_t *pc,
    void *data);
static void ngx_stream_ferrule_free_peer(ngx_peer_connection_t *pc,
    void *data, ngx_uint_t state);


static ngx_command_t  ngx_stream_ferrule_commands[] = {

    { ngx_string("ferrule_stream_peers"),
      NGX_STREAM_UPS_CONF|NGX_CONF_TAKE2,
      ngx_stream_ferrule_peers,
      NGX_STREAM_SRV_CONF_OFFSET,
      0,
      NULL },

      ngx_null_command
};


static ngx_stream_module_t  ngx_stream_ferrule_module_ctx = {
    NULL,                                  /* preconfiguration */
    NULL,                                  /* postconfiguration */

    NULL,                                  /* create main configuration */
    NULL,                                  /* init main configuration */

    ngx_stream_ferrule_create_srv_conf,    /* create server configuration */
    NULL                                   /* merge server configuration */
};


ngx_module_t  ngx_stream_ferrule_module = {
    NGX_MODULE_V1,
    &ngx_stream_ferrule_module_ctx,        /* module context */
    ngx_stream_ferrule_commands,           /* module directives */
    NGX_STREAM_MODULE,                     /* module type */
    NULL,                                  /* init master */
    NULL,                                  /* init module */
    NULL,                                  /* init process */
    NULL,                                  /* init thread */
    NULL,                                  /* exit thread */
    NULL,                                  /* exit process */
    NULL,                                  /* exit master */
    NGX_MODULE_V1_PADDING
};


/* the worker's peers files, by backend name */
static ngx_rbtree_t       ngx_stream_ferrule_backends;
static ngx_rbtree_node_t  ngx_stream_ferrule_sentinel;


static void *
ngx_stream_ferrule_create_srv_conf(ngx_conf_t *cf)
{
    ngx_stream_ferrule_srv_conf_t  *conf;

    conf = ngx_pcalloc(cf->pool, sizeof(ngx_stream_ferrule_srv_conf_t));
    if (conf == NULL) {
        return NULL;
    }

    conf->index = NGX_ERROR;

    return conf;
}


static char *
ngx_stream_ferrule_peers(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_stream_ferrule_srv_conf_t *fscf = conf;

    ngx_str_t                       *value, name;
    ngx_stream_upstream_srv_conf_t  *uscf;

    if (fscf->original_init_upstream) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (value[1].len == 0 || value[1].data[0] != '/') {
        return "needs an absolute directory";
    }

    if (value[2].len < 2 || value[2].data[0] != '$') {
        return "needs a variable";
    }

    fscf->dir = value[1];

    name.len = value[2].len - 1;
    name.data = value[2].data + 1;
    fscf->index = ngx_stream_get_variable_index(cf, &name);
    if (fscf->index == NGX_ERROR) {
        return NGX_CONF_ERROR;
    }

    uscf = ngx_stream_conf_get_module_srv_conf(cf, ngx_stream_upstream_module);

    fscf->original_init_upstream = uscf->peer.init_upstream
                                   ? uscf->peer.init_upstream
                                   : ngx_stream_upstream_init_round_robin;
    uscf->peer.init_upstream = ngx_stream_ferrule_init_upstream;

    return NGX_CONF_OK;
}


static ngx_int_t
ngx_stream_ferrule_init_upstream(ngx_conf_t *cf,
    ngx_stream_upstream_srv_conf_t *us)
{
    ngx_stream_ferrule_srv_conf_t  *fscf;

    fscf = ngx_stream_conf_upstream_srv_conf(us, ngx_stream_ferrule_module);

    /* the placeholder server the upstream block needs, never connected to */
    if (fscf->original_init_upstream(cf, us) != NGX_OK) {
        return NGX_ERROR;
    }

    us->peer.init = ngx_stream_ferrule_init_peer;

    if (ngx_stream_ferrule_backends.root == NULL) {
        ngx_rbtree_init(&ngx_stream_ferrule_backends,
                        &ngx_stream_ferrule_sentinel,
                        ngx_str_rbtree_insert_value);
    }

    return NGX_OK;
}


/* whether `name` is a backend name (see NGX_STREAM_FERRULE_NAME_MAX) */
static ngx_int_t
ngx_stream_ferrule_valid_name(ngx_str_t *name)
{
    u_char      c;
    ngx_uint_t  i;

    if (name->len == 0 || name->len > NGX_STREAM_FERRULE_NAME_MAX) {
        return 0;
    }

    for (i = 0; i < name->len; i++) {
        c = name->data[i];
        if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')
            || (i > 0 && (c == '.' || c == '_' || c == '-')))
        {
            continue;
        }
        return 0;
    }

    return 1;
}


/*
 * The peers of the file's text `p`..`last` into `b` (its pool): the quoted
 * strings of the "peers" array, after checking that "backend" is `name`.
 * Names and addresses hold no quote or backslash, so no escape is read.
 */
static ngx_int_t
ngx_stream_ferrule_parse(ngx_stream_ferrule_backend_t *b, ngx_str_t *name,
    u_char *p, u_char *last, ngx_log_t *log)
{
    u_char      *q, *start;
    ngx_uint_t   n, quoted;
    ngx_addr_t  *peers;

    q = ngx_strlcasestrn(p, last, (u_char *) "\"backend\":\"", 11 - 1);
    if (q == NULL) {
        return NGX_ERROR;
    }
    q += 11;
    if ((size_t) (last - q) <= name->len
        || ngx_strncmp(q, name->data, name->len) != 0
        || q[name->len] != '"')
    {
        return NGX_ERROR;
    }

    q = ngx_strlcasestrn(p, last, (u_char *) "\"peers\":[", 9 - 1);
    if (q == NULL) {
        return NGX_ERROR;
    }
    q += 9;

    /* at most one peer per quote pair, up to the array's end: a "]" outside
     * quotes ("[v6]:port" holds one) */
    n = 0;
    quoted = 0;
    for (start = q; start < last && (quoted || *start != ']'); start++) {
        if (*start == '"') {
            n++;
            quoted = !quoted;
        }
    }
    n /= 2;

    peers = ngx_pcalloc(b->pool, (n ? n : 1) * sizeof(ngx_addr_t));
    if (peers == NULL) {
        return NGX_ERROR;
    }

    b->npeers = 0;

    while (q < last && *q != ']') {
        if (*q != '"') {
            q++;
            continue;
        }

        start = ++q;
        while (q < last && *q != '"') {
            q++;
        }
        if (q == last || b->npeers == n) {
            return NGX_ERROR;
        }

        if (ngx_parse_addr_port(b->pool, &peers[b->npeers], start, q - start)
            != NGX_OK)
        {
            ngx_log_error(NGX_LOG_ERR, log, 0,
                          "ferrule: stream backend %V: bad peer \"%*s\"",
                          name, q - start, start);
            return NGX_ERROR;
        }

        peers[b->npeers].name.data = ngx_pnalloc(b->pool, q - start);
        if (peers[b->npeers].name.data == NULL) {
            return NGX_ERROR;
        }
        ngx_memcpy(peers[b->npeers].name.data, start, q - start);
        peers[b->npeers].name.len = q - start;

        b->npeers++;
        q++;
    }

    b->peers = peers;

    return NGX_OK;
}


/* Drops a worker's copy of a peers file and closes the file it held. */
static void
ngx_stream_ferrule_forget(ngx_stream_ferrule_backend_t *b, ngx_log_t *log)
{
    ngx_rbtree_delete(&ngx_stream_ferrule_backends, &b->sn.node);

    if (ngx_close_file(b->fd) == NGX_FILE_ERROR) {
        ngx_log_error(NGX_LOG_ALERT, log, ngx_errno,
                      ngx_close_file_n " of a peers file failed");
    }

    ngx_destroy_pool(b->pool);
}


/*
 * Backend `name`'s peers as its file holds them now, read again if it changed;
 * NULL when there is no such file or it does not parse (NGINX then closes the
 * connection, as njs/stream.js with no peer).
 */
static ngx_stream_ferrule_backend_t *
ngx_stream_ferrule_backend(ngx_stream_ferrule_srv_conf_t *fscf,
    ngx_str_t *name, ngx_log_t *log)
{
    u_char                        *p, path[NGX_MAX_PATH];
    ssize_t                        n;
    uint32_t                       hash;
    ngx_fd_t                       fd;
    ngx_pool_t                    *pool;
    ngx_file_info_t                fi;
    ngx_stream_ferrule_backend_t  *b, *old;

    if (fscf->dir.len + 1 + name->len + sizeof(".json") > NGX_MAX_PATH) {
        return NULL;
    }

    p = ngx_cpymem(path, fscf->dir.data, fscf->dir.len);
    *p++ = '/';
    p = ngx_cpymem(p, name->data, name->len);
    p = ngx_cpymem(p, ".json", sizeof(".json"));

    hash = ngx_crc32_short(name->data, name->len);
    old = (ngx_stream_ferrule_backend_t *)
          ngx_str_rbtree_lookup(&ngx_stream_ferrule_backends, name, hash);

    fd = ngx_open_file(path, NGX_FILE_RDONLY, NGX_FILE_OPEN, 0);
    if (fd == NGX_INVALID_FILE) {
        if (ngx_errno != NGX_ENOENT) {
            ngx_log_error(NGX_LOG_ERR, log, ngx_errno,
                          "ferrule: stream backend %V: open \"%s\"", name,
                          path);
        } else if (old) {
            /* the backend is gone: let its file's inode go too */
            ngx_stream_ferrule_forget(old, log);
        }
        return NULL;
    }

    b = NULL;

    if (ngx_fd_info(fd, &fi) == NGX_FILE_ERROR) {
        goto done;
    }

    if (old && old->uniq == ngx_file_uniq(&fi)
        && old->mtime == ngx_file_mtime(&fi) && old->size == ngx_file_size(&fi))
    {
        b = old;
        goto done;
    }

    if (ngx_file_size(&fi) > NGX_STREAM_FERRULE_FILE_MAX) {
        ngx_log_error(NGX_LOG_ERR, log, 0,
                      "ferrule: stream backend %V: \"%s\" is too large", name,
                      path);
        goto done;
    }

    pool = ngx_create_pool(NGX_DEFAULT_POOL_SIZE, ngx_cycle->log);
    if (pool == NULL) {
        goto done;
    }

    b = ngx_pcalloc(pool, sizeof(ngx_stream_ferrule_backend_t));
    p = ngx_pnalloc(pool, ngx_file_size(&fi) + 1);
    if (b == NULL || p == NULL) {
        ngx_destroy_pool(pool);
        b = NULL;
        goto done;
    }

    n = ngx_read_fd(fd, p, ngx_file_size(&fi));
    if (n != (ssize_t) ngx_file_size(&fi)) {
        ngx_destroy_pool(pool);
        b = NULL;
        goto done;
    }

    b->pool = pool;
    b->uniq = ngx_file_uniq(&fi);
    b->mtime = ngx_file_mtime(&fi);
    b->size = ngx_file_size(&fi);
    b->rr = old ? old->rr : 0;

    if (ngx_stream_ferrule_parse(b, name, p, p + n, log) != NGX_OK) {
        ngx_log_error(NGX_LOG_ERR, log, 0,
                      "ferrule: stream backend %V: \"%s\" does not parse",
                      name, path);
        ngx_destroy_pool(pool);
        b = NULL;
        goto done;
    }

    b->sn.str.data = ngx_pnalloc(pool, name->len);
    if (b->sn.str.data == NULL) {
        ngx_destroy_pool(pool);
        b = NULL;
        goto done;
    }
    ngx_memcpy(b->sn.str.data, name->data, name->len);
    b->sn.str.len = name->len;
    b->sn.node.key = hash;

    /* a session copied its peers: the old copy can go */
    if (old) {
        ngx_stream_ferrule_forget(old, log);
    }

    b->fd = fd;
    ngx_rbtree_insert(&ngx_stream_ferrule_backends, &b->sn.node);

    return b;

done:

    if (ngx_close_file(fd) == NGX_FILE_ERROR) {
        ngx_log_error(NGX_LOG_ALERT, log, ngx_errno,
                      ngx_close_file_n " \"%s\" failed", path);
    }

    return b;
}


static ngx_int_t
ngx_stream_ferrule_init_peer(ngx_stream_session_t *s,
    ngx_stream_upstream_srv_conf_t *us)
{
    ngx_str_t                       name;
    ngx_uint_t                      i, start;
    ngx_stream_variable_value_t    *v;
    ngx_stream_ferrule_session_t   *fs;
    ngx_stream_ferrule_backend_t   *b;
    ngx_stream_ferrule_srv_conf_t  *fscf;

    fscf = ngx_stream_conf_upstream_srv_conf(us, ngx_stream_ferrule_module);

    v = ngx_stream_get_indexed_variable(s, fscf->index);
    if (v == NULL || v->not_found) {
        return NGX_ERROR;
    }

    name.len = v->len;
    name.data = v->data;

    if (!ngx_stream_ferrule_valid_name(&name)) {
        return NGX_ERROR;
    }

    b = ngx_stream_ferrule_backend(fscf, &name, s->connection->log);
    if (b == NULL) {
        return NGX_ERROR;
    }

    if (b->npeers == 0) {
        ngx_log_error(NGX_LOG_WARN, s->connection->log, 0,
                      "ferrule: stream backend %V has no endpoints", &name);
        return NGX_ERROR;
    }

    /* the backend's copy may be replaced during the session: copy the peers */
    fs = ngx_palloc(s->connection->pool, sizeof(ngx_stream_ferrule_session_t));
    if (fs == NULL) {
        return NGX_ERROR;
    }

    fs->npeers = ngx_min(b->npeers, NGX_STREAM_FERRULE_MAX_TRIES);
    fs->peers = ngx_palloc(s->connection->pool,
                           fs->npeers * sizeof(ngx_addr_t));
    if (fs->peers == NULL) {
        return NGX_ERROR;
    }

    start = b->rr++ % b->npeers;

    for (i = 0; i < fs->npeers; i++) {
        fs->peers[i] = b->peers[(start + i) % b->npeers];

        fs->peers[i].sockaddr = ngx_palloc(s->connection->pool,
                                           fs->peers[i].socklen);
        if (fs->peers[i].sockaddr == NULL) {
            return NGX_ERROR;
        }
        ngx_memcpy(fs->peers[i].sockaddr, b->peers[(start + i) % b->npeers]
                   .sockaddr, fs->peers[i].socklen);

        fs->peers[i].name.data = ngx_pstrdup(s->connection->pool,
                                             &fs->peers[i].name);
        if (fs->peers[i].name.data == NULL) {
            return NGX_ERROR;
        }
    }

    fs->next = 0;

    s->upstream->peer.data = fs;
    s->upstream->peer.get = ngx_stream_ferrule_get_peer;
    s->upstream->peer.free = ngx_stream_ferrule_free_peer;
    /* proxy_next_upstream_tries lowers it */
    s->upstream->peer.tries = fs->npeers;

    return NGX_OK;
}


static ngx_int_t
ngx_stream_ferrule_get_peer(ngx_peer_connection_t *pc, void *data)
{
    ngx_stream_ferrule_session_t *fs = data;

    ngx_addr_t  *peer;

    if (fs->next >= fs->npeers) {
        return NGX_BUSY;
    }

    peer = &fs->peers[fs->next++];

    pc->sockaddr = peer->sockaddr;
    pc->socklen = peer->socklen;
    pc->name = &peer->name;

    return NGX_OK;
}


static void
ngx_stream_ferrule_free_peer(ngx_peer_connection_t *pc, void *data,
    ngx_uint_t state)
{
    if (pc->tries) {
        pc->tries--;
    }
}
