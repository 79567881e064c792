#!/bin/sh
# Runs inside the image's root file system after its packages are installed, in both
# builds: image/build.sh (mmdebstrap) and image/Containerfile (apt-get). Keep it
# POSIX sh with the Essential tools only: the mmdebstrap base has no useradd.
set -eu

# The user Ferrule and NGINX run as: uid/gid 101, as ingress-nginx's www-data.
grep -q '^ferrule:' /etc/group || echo 'ferrule:x:101:' >>/etc/group
grep -q '^ferrule:' /etc/passwd ||
    echo 'ferrule:x:101:101:Ferrule:/var/lib/ferrule:/usr/sbin/nologin' >>/etc/passwd
grep -q '^ferrule:' /etc/shadow 2>/dev/null || echo 'ferrule:!:1::::::' >>/etc/shadow

# The only directories it writes to (emptyDirs under readOnlyRootFilesystem):
# the NGINX prefix (--nginx-prefix, default /var/lib/ferrule/nginx) and /tmp.
mkdir -p /var/lib/ferrule/nginx
chown -R 101:101 /var/lib/ferrule
chmod 0755 /var/lib/ferrule /var/lib/ferrule/nginx
chmod 1777 /tmp

# Debian's own NGINX site and service are not used: Ferrule renders its own
# configuration into the prefix.
rm -f /etc/nginx/sites-enabled/default

# Nothing that only a person at a shell or apt would read.
rm -rf /usr/share/doc/* /usr/share/man/* /usr/share/info/* /usr/share/locale/* \
    /usr/share/lintian /usr/share/linda /var/cache/debconf/*-old \
    /var/lib/apt/lists/* /var/cache/apt/* /var/log/apt /var/log/dpkg.log \
    /var/log/alternatives.log /var/log/bootstrap.log
