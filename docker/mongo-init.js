// Creates Sweepstack's own MongoDB user, the one in SWEEPSTACK_MONGO_URL, so that the API,
// scheduler and workers do not hold the root password. The mongo image runs this once, as
// root, when its data volume is empty (/docker-entrypoint-initdb.d); changing
// MONGO_APP_PASSWORD later needs db.changeUserPassword (see docs/deploy.md).
const user = process.env.MONGO_APP_USER;
const password = process.env.MONGO_APP_PASSWORD;
const dbName = process.env.MONGO_APP_DB || "sweepstack";
if (!user || !password) {
  throw new Error("MONGO_APP_USER and MONGO_APP_PASSWORD must be set");
}
db.getSiblingDB("admin").createUser({
  user: user,
  pwd: password,
  roles: [
    { role: "readWrite", db: dbName },
    { role: "dbAdmin", db: dbName },
  ],
});
print(`sweepstack: created user ${user} with readWrite and dbAdmin on ${dbName}`);
